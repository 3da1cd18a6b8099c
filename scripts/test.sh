#!/usr/bin/env bash
# One command, fresh machine: install steerformer with its test extras (torch first, only when
# missing: see scripts/ensure_torch.sh) and run the whole offline test suite. .ci/run calls
# exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_torch.sh    # torch only when missing; TORCH_INDEX_URL picks the build
bash scripts/install.sh test,smol    # no compiler needed (see the script)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
python3 -m pytest -q "$@"
