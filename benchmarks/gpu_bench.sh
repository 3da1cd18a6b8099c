#!/usr/bin/env bash
# GPU benchmark (issue 14 item 6): per-layer eig time CPU vs GPU, the collapse pass ratio on CUDA,
# and `analyze` / `collapse` / `steer` end to end with --device cuda. Prints the card's name.
# On a machine without CUDA every step says so and exits cleanly (status 0).
#   bash benchmarks/gpu_bench.sh
set -u
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
python - <<'PY'
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY
uptime
echo "== per-layer eig, CPU vs GPU"
timeout 900 python benchmarks/gpu_eig.py --d 1024 2048 4096 --layers 3
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== collapse pass ratio on CUDA (target <= 1.10)"
  timeout 600 python benchmarks/bench_collapse.py --passes 12 --device cuda
  out=$(mktemp -d)
  echo "== end to end with --device cuda (bundled MiniLM)"
  m=sentence-transformers/all-MiniLM-L6-v2
  /usr/bin/time -f "analyze: %e s" steerformer analyze "$m" --device cuda --out "$out/a" --no-plots > /dev/null
  /usr/bin/time -f "collapse: %e s" steerformer collapse "$m" --device cuda --out "$out/c" > /dev/null || echo "collapse --device cuda failed"
  /usr/bin/time -f "steer: %e s" steerformer steer "$m" --device cuda --out "$out/s" > /dev/null || echo "steer --device cuda failed"
else
  echo "no CUDA device: skipped the collapse ratio and the --device cuda runs"
  steerformer analyze sentence-transformers/all-MiniLM-L6-v2 --device cuda --spectra-only --out "$(mktemp -d)" \
    && echo "UNEXPECTED: analyze --device cuda succeeded without CUDA" \
    || echo "(expected) analyze --device cuda refused cleanly without CUDA (exit $?)"
fi
