#!/usr/bin/env bash
# One command, fresh machine: install steerformer with its test extras (torch first, only when
# missing: see scripts/ensure_torch.sh) and run the whole offline test suite. .ci/run calls
# exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_torch.sh    # torch only when missing; TORCH_INDEX_URL picks the build
bash scripts/install.sh test,smol    # no compiler needed (see the script)
# The report pages' browser tests (tests/report/) drive a headless Chromium: installed here when it
# is missing and this runs as root with apt-get (CI); elsewhere those tests skip with one line saying how.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium for the report pages' browser tests (apt-get) ..."
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "chromium could not be installed: the browser tests will be skipped" >&2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
# One worker per core (pytest-xdist); worksteal hands a finished worker the queue of a busy one, so a few
# long tests at the end do not leave a core idle. The 15 slowest tests are listed at the end.
python3 -m pytest -q -n auto --dist worksteal --durations=15 "$@"
