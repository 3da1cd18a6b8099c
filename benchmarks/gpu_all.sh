#!/usr/bin/env bash
# The one entry script of a lent GPU (issue 18 item 6): install this checkout without touching the
# machine's torch/transformers, then gpu_smoke.sh (every command, CPU vs CUDA, with tolerances)
# and gpu_bench.sh (eig CPU vs GPU around CUDA_EIG_FROM, collapse pass ratio, the Llama-3-8B and
# -70B shapes end to end). Sized for one device call of at most 8 minutes.
#   bash benchmarks/gpu_all.sh            (from the repository root, on the device machine)
set -u
cd "$(dirname "$0")/.."
python -m pip install -q --no-deps --no-build-isolation . || exit 1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
W=$(mktemp -d)
echo "== gpu_smoke.sh"; timeout 200 bash benchmarks/gpu_smoke.sh "$W/smoke"; smoke=$?
echo "== gpu_bench.sh"; timeout 260 bash benchmarks/gpu_bench.sh
echo "gpu_smoke exit status: $smoke"
exit $smoke
