#!/usr/bin/env bash
# One command, fresh machine: install steerformer with its test extras (CPU torch first) and run
# the whole offline test suite. .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[test]"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
python3 -m pytest -q "$@"
