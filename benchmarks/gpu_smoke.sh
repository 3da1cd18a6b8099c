#!/usr/bin/env bash
# GPU smoke test: every command with --device cuda on a tiny random GPT-2 and a tiny grouped-query
# Llama (analyze with statistics, steer in its modes and in bf16, verify, unsteer, collapse in its
# variants and resumed, sweep), each compared with the same command on the CPU at the tolerance
# printed on its line (float64 paths 1e-6, float32 records 1e-3, bf16 runs 2e-2 / 5e-2; random
# collapse weights are drawn by each device's own generator, so they run but are not compared).
# Not covered here: contrastive and --token steering (they need a tokenizer; there is no network
# on the device machine), --through-ffn (autograd; covered by the same comparison as the record). Prints the card and one line per comparison; exits 1
# when a comparison is off. Needs a CUDA build of torch and a GPU (not runnable on the CI machine).
# Run from the repository root: bash benchmarks/gpu_smoke.sh [WORKDIR]
# (GPU_SMOKE_DEVICE=cpu dry-runs the script itself on a machine without a GPU.)
set -euo pipefail
DEV="${GPU_SMOKE_DEVICE:-cuda}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
W="${1:-$(mktemp -d)}"
mkdir -p "$W"
python - "$W" "$DEV" <<'PY'
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
print("card:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO CUDA DEVICE")
if sys.argv[2] == "cuda" and not torch.cuda.is_available():
    sys.exit("gpu_smoke: torch.cuda.is_available() is False")
torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=101, n_positions=64, bos_token_id=0, eos_token_id=0)
cfg._attn_implementation = "eager"
GPT2LMHeadModel(cfg).eval().save_pretrained(sys.argv[1] + "/tiny")
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=64, vocab_size=101, max_position_embeddings=64)).eval().save_pretrained(sys.argv[1] + "/llama")
import numpy as np
np.save(sys.argv[1] + "/u.npy", np.random.default_rng(0).standard_normal(64))
PY
M="$W/tiny"
for pair in "cpu:cpu" "dev:$DEV"; do
  tag="${pair%%:*}"; dev="${pair#*:}"
  steerformer analyze "$M" --device "$dev" --out "$W/analyze-$tag" --no-plots --spectra-only --json > "$W/analyze-$tag.json"
  steerformer steer "$M" --device "$dev" --direction "$W/u.npy" --solve exact --gain 2 --quiet \
      --record "$W/steer-$tag.json" --out "$W/steered-$tag"
  steerformer steer "$M" --device "$dev" --direction "$W/u.npy" --target-alignment 0.5 --quiet \
      --record "$W/search-$tag.json"
  steerformer collapse "$M" --device "$dev" --passes 3 --n-prompts 4 --length 16 --no-decode --out "$W/collapse-$tag" > /dev/null
  steerformer verify "$W/steered-$tag" > /dev/null
  steerformer unsteer "$W/steered-$tag" --out "$W/unsteered-$tag" > /dev/null
  # grouped-query model: factored spectra, statistics with the null model and the cumulative product
  steerformer analyze "$W/llama" --device "$dev" --out "$W/stats-$tag" --no-plots --n-prompts 4 --n-tokens 6 \
      --null-draws 3 --json > "$W/stats-$tag.json"
  steerformer steer "$W/llama" --device "$dev" --direction "$W/u.npy" --method ablation --quiet --record "$W/ablate-$tag.json"
  steerformer steer "$W/llama" --device "$dev" --dtype bf16 --direction "$W/u.npy" --solve exact --gain 2 --quiet \
      --record "$W/bf16-$tag.json"
  for v in "--no-ffn" "--weights random" "--weights random-per-pass" "--dtype bf16"; do
    steerformer collapse "$W/llama" --device "$dev" $v --passes 2 --n-prompts 3 --length 8 --no-decode \
        --out "$W/collapse-${v//[ -]/}-$tag" > /dev/null
  done
  steerformer collapse "$W/llama" --device "$dev" --passes 1 --n-prompts 3 --length 8 --no-decode --out "$W/resume-$tag" > /dev/null
  steerformer collapse "$W/llama" --device "$dev" --passes 3 --n-prompts 3 --length 8 --no-decode --out "$W/resume-$tag" --resume > /dev/null
  steerformer sweep --models "$M,$W/llama" --device "$dev" --stats --n-prompts 3 --no-plots --out "$W/sweep-$tag" > /dev/null
done
python - "$W" "$DEV" <<'PY'
import json, sys
import numpy as np
from safetensors.numpy import load_file
W, D, bad = sys.argv[1], sys.argv[2], 0  # files: *-cpu (reference) and *-dev (the device D)
def report(name, err, tol):
    global bad
    ok = err <= tol
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max difference {D} vs cpu {err:.3g} (tolerance {tol:g})")
def nums(x):
    if isinstance(x, dict): return [v for k in sorted(x) for v in nums(x[k])]
    if isinstance(x, list): return [v for y in x for v in nums(y)]
    return [float(x)] if isinstance(x, (int, float)) and not isinstance(x, bool) else []
a, b = (json.load(open(f"{W}/analyze-{d}.json")) for d in ("cpu", "dev"))
report("analyze report numbers", float(np.max(np.abs(np.subtract(nums(a.get("layers", a)), nums(b.get("layers", b)))))), 1e-6)
a, b = (load_file(f"{W}/steered-{d}/model.safetensors") for d in ("cpu", "dev"))
report("steer --gain 2 --solve exact: stored weights (bit-exact edit expected)",
       max(float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max()) for k in a), 0.0)
for name in ("steer", "search"):
    a, b = (json.load(open(f"{W}/{name}-{d}.json")) for d in ("cpu", "dev"))
    keys = ["gain", "alignment_model_after", "alignment_dynamics_after", "kl", "weight_change"]
    report(f"steer record ({name}): {', '.join(keys)}",
           max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for k in keys if a.get(k) is not None), 1e-3)
a, b = (np.load(f"{W}/collapse-{d}/collapse.npz") for d in ("cpu", "dev"))
e = "e" if "e" in a.files else a.files[0]
report(f"collapse {e}", float(np.max(np.abs(a[e] - b[e]) / np.maximum(np.abs(a[e]), 1e-12))), 1e-3)
a, b = (json.load(open(f"{W}/stats-{d}.json")) for d in ("cpu", "dev"))
report("analyze statistics (grouped-query model, null model, cumulative)",
       float(np.max(np.abs(np.subtract(nums(a["power_method"]), nums(b["power_method"]))))), 1e-6)
for name in ("ablate", "bf16"):
    a, b = (json.load(open(f"{W}/{name}-{d}.json")) for d in ("cpu", "dev"))
    keys = [k for k in ("gain", "kl", "weight_change") if a.get(k) is not None]
    report(f"steer record ({name}): {', '.join(keys)}", max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for k in keys),
           1e-3 if name == "ablate" else 2e-2)  # bf16: the device's bf16 kernels round differently
for v in ("noffn", "dtypebf16"):  # random weights come from each device's own generator: not compared
    a, b = (np.load(f"{W}/collapse-{v}-{d}/collapse.npz") for d in ("cpu", "dev"))
    tol = 1e-3 if v == "noffn" else 5e-2
    report(f"collapse --{v} e", float(np.max(np.abs(a["e"] - b["e"]) / np.maximum(np.abs(a["e"]), 1e-12))), tol)
a, b = (np.load(f"{W}/resume-{d}/collapse.npz") for d in ("cpu", "dev"))
report("collapse resumed to 3 passes e", float(np.max(np.abs(a["e"] - b["e"]) / np.maximum(np.abs(a["e"]), 1e-12))), 1e-3)
import csv
a, b = ([r for r in csv.DictReader(open(f"{W}/sweep-{d}/sweep.csv"))] for d in ("cpu", "dev"))
report("sweep lambda1 and delta rho", max(abs(float(x[k] or 0) - float(y[k] or 0)) for x, y in zip(a, b)
                                          for k in ("lambda1_re", "delta_rho_mean") if k in x), 1e-6)
sys.exit(1 if bad else 0)
PY
