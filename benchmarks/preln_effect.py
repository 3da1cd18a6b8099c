"""Effect and cost of running the statistics with and without a pre-LN model's pre-attention norm
(docs/statistics.md). A random GPT-2 built from a config (the library's default initializer, no
checkpoint: weights cannot be downloaded here), 100 × 10 random tokens, no null model:

    python benchmarks/preln_effect.py [--layers 6] [--d 256] [--heads 8] [--smoke]

Prints per layer Δρ, P and the verdict without the norm (eq. (1), `controlled`) and with it
(`controlled_layer_norm`), then the time of the default run (both) ÷ the time of one variant.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch
from transformers import GPT2Config, GPT2Model

from steerformer.loading import open_source
from steerformer.matrices import layer_matrices
from steerformer.spectra import spectra
from steerformer.stats import power_method_stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="2 layers, d = 32: what the test suite runs")
    args = ap.parse_args()
    if args.smoke:
        args.layers, args.d, args.heads = 2, 32, 4
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=args.layers, n_embd=args.d, n_head=args.heads, vocab_size=256,
                                 n_positions=64, bos_token_id=0, eos_token_id=0)).eval()
    src = open_source(model)
    lm = layer_matrices(src)
    sp = spectra(lm)
    kw = dict(matrices=lm, spectra=sp, full_model=False, null_draws=0)
    t0 = time.perf_counter()
    one = power_method_stats(src, layer_norm=False, **kw)
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    both = power_method_stats(src, **kw)
    t_both = time.perf_counter() - t0
    print(f"random GPT-2, {args.layers} layers, d={args.d}, {args.heads} heads (default init)")
    print(f"{'layer':>5} {'Δρ without':>11} {'P':>5} {'step':>5} | {'Δρ with ln_1':>12} {'P':>5} {'step':>5}")
    for a, b in zip(both.controlled.layers, both.controlled_layer_norm.layers):
        print(f"{a['layer']:>5} {a['delta_rho_mean']:>+11.4f} {a['P']:>5.2f} {str(a['power_method_step']):>5} | "
              f"{b['delta_rho_mean']:>+12.4f} {b['P']:>5.2f} {str(b['power_method_step']):>5}")
    print(f"without: {both.controlled.summary()}")
    print(f"with ln_1: {both.controlled_layer_norm.summary()}")
    print(f"ratio of the times, both / one variant (statistics only, spectra given): {t_both / t_one:.2f} "
          f"({t_both:.2f} s / {t_one:.2f} s)")
    assert one.controlled_layer_norm is None


if __name__ == "__main__":
    main()
