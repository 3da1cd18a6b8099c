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
echo "== per-layer eig, CPU vs GPU (places eig.CUDA_EIG_FROM)"
timeout 120 python benchmarks/gpu_eig.py --d 1024 1536 2048 4096 --layers 2
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== collapse pass ratio on CUDA (target <= 1.10)"
  timeout 60 python benchmarks/bench_collapse.py --passes 6 --device cuda
  echo "== Llama-3-8B shape (32 layers, bf16): factor read ratio"
  timeout 150 python benchmarks/bench_families.py --layers 32 --skip-rss
  echo "== Llama-3-70B shape, V/O only (80 layers, 12 GB): analyze --spectra-only, CPU then CUDA"
  timeout 240 python benchmarks/bench_70b_spectra.py --device cpu
  timeout 60 python benchmarks/bench_70b_spectra.py --device cuda
  out=$(mktemp -d)
  echo "== end to end with --device cuda on the Llama-3-8B shape (bf16, 32 layers; built by bench_families.py)"
  m=benchmarks/.cache/llama3-8b-shaped-32L
  python -c "import numpy as np; np.save('$out/u.npy', np.random.default_rng(0).standard_normal(4096))"
  /usr/bin/time -f "analyze with statistics: %e s" steerformer analyze "$m" --device cuda --out "$out/a" --no-plots \
      --n-prompts 20 --null-draws 2 > /dev/null || echo "analyze --device cuda failed"
  /usr/bin/time -f "collapse: %e s" steerformer collapse "$m" --device cuda --passes 3 --n-prompts 20 --length 100 \
      --out "$out/c" > /dev/null || echo "collapse --device cuda failed"
  /usr/bin/time -f "steer + save: %e s" steerformer steer "$m" --device cuda --direction "$out/u.npy" --solve exact \
      --gain 1 --quiet --out "$out/s" > /dev/null || echo "steer --device cuda failed"
else
  echo "no CUDA device: skipped the collapse ratio and the --device cuda runs"
  steerformer analyze sentence-transformers/all-MiniLM-L6-v2 --device cuda --spectra-only --out "$(mktemp -d)" \
    && echo "UNEXPECTED: analyze --device cuda succeeded without CUDA" \
    || echo "(expected) analyze --device cuda refused cleanly without CUDA (exit $?)"
fi
