"""Cost of the power-method statistics against the spectra they build on.

A gpt2-medium-sized random model (24 layers, d = 1024, 16 heads; built in memory from a config,
random weights — only the attention weights matter here), 100 × 10 random tokens:

    ratio = time(dynamics + statistics) / time(spectra)          target ≤ 0.25

Run:  python benchmarks/bench_stats.py [--layers 24] [--prompts 100] [--tokens 10] [--dtype float64] [--smoke]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

# Measure this checkout, not whatever steerformer is installed.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import SMOKE_HELP  # noqa: E402

import torch
from transformers import GPT2Config, GPT2Model

from steerformer import layer_matrices, run_dynamics, spectra
from steerformer.loading import open_source
from steerformer.matrices import read_attention_weights
from steerformer.stats import alignment_stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:
        args.layers, args.d, args.heads, args.prompts, args.tokens = 3, 64, 4, 5, 4
    dtype = getattr(torch, args.dtype)

    torch.manual_seed(0)
    # Small vocabulary and positions: the embeddings play no part in the measured path.
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.d, n_head=args.heads, vocab_size=256, n_positions=64)
    model = GPT2Model(cfg).eval()
    src = open_source(model)
    lm = layer_matrices(src)
    weights = read_attention_weights(src, dtype=dtype)

    t0 = time.perf_counter()
    sp = spectra(lm, dtype=dtype)
    t_spectra = time.perf_counter() - t0

    t0 = time.perf_counter()
    traj = run_dynamics(src, n_prompts=args.prompts, n_tokens=args.tokens, seed=0, weights=weights, dtype=dtype)
    t_dyn = time.perf_counter() - t0
    # Warm-up on the first two steps (first-call allocations and lazy imports are not per-layer cost).
    alignment_stats(traj.states[:3], sp, matrices=lm, step_layers=traj.layer_ids[:2], cumulative=True)
    t0 = time.perf_counter()
    st = alignment_stats(traj, sp, matrices=lm, cumulative=False)
    t_stats = time.perf_counter() - t0
    t0 = time.perf_counter()
    alignment_stats(traj, sp, matrices=lm, cumulative=True)
    t_stats_cum = time.perf_counter() - t0
    t_cum = t_stats_cum - t_stats

    L = args.layers
    total = t_dyn + t_stats_cum
    print(f"model: {L} layers, d={args.d}, {args.heads} heads (random GPT-2); tokens: {args.prompts} x {args.tokens}; "
          f"dtype {args.dtype}; torch threads {torch.get_num_threads()}")
    print(f"spectra (one eig per layer):           {t_spectra:8.2f} s  ({t_spectra / L:.3f} s/layer)")
    print(f"dynamics:                              {t_dyn:8.2f} s  ({t_dyn / L:.3f} s/layer)")
    print(f"statistics without cumulative product: {t_stats:8.2f} s  ({t_stats / L:.3f} s/layer)")
    print(f"cumulative product (GEMM + Arnoldi):   {t_cum:8.2f} s  ({t_cum / L:.3f} s/layer)")
    print(f"ratio (dynamics + statistics) / spectra = {total / t_spectra:.3f}   (target <= 0.25)")
    print(st.summary())


if __name__ == "__main__":
    main()
