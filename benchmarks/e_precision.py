"""Below which E the paper's fp16 arithmetic stops tracking the true E (docs/collapse.md).

Tokens y_i = N(c + ε g_i) around a common direction c (d = 1600 as GPT-2 XL, n = 200 tokens,
20 prompts), stored in fp16 as the reference code's states are. For each ε: the float64 E of those
fp16 states (``--e-precision float64``) and the reference code's fp16 arithmetic
(``--e-precision states``), with the relative difference. No model is needed: this is the
arithmetic of E alone.

The last column is the ratio of the two (the float64 E is the baseline, same run).

    python benchmarks/e_precision.py [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from steerformer.collapse.metrics import consensus_stats

sys.path.insert(0, os.path.dirname(__file__))
from _common import SMOKE_HELP  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    smoke = ap.parse_args().smoke
    g = torch.Generator().manual_seed(0)
    d, n, prompts = (64, 20, 2) if smoke else (1600, 200, 20)
    c = torch.randn(d, generator=g, dtype=torch.float64)
    c = 10 * c / c.norm()  # hidden states of norm ~10, as after a final LayerNorm-scale block
    print(f"{'eps':>8} {'E float64':>11} {'E fp16 (reference)':>19} {'rel. diff':>10} {'ratio':>7}  distinct per-prompt fp16 values")
    for eps in (3e-1, 1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4):
        h = (c + eps * torch.randn(prompts, n, d, generator=g, dtype=torch.float64) * c.norm() / d ** 0.5).half()
        e64 = consensus_stats(h, "float64")[0].double().mean()
        per = consensus_stats(h, "states")[0].double()
        e16 = per.mean()
        vals = ", ".join(f"{v:.2e}" for v in sorted(set(per.tolist()))[:4])
        print(f"{eps:>8.0e} {float(e64):>11.3e} {float(e16):>19.3e} {abs(float(e16 - e64)) / float(e64):>10.2f} "
              f"{float(e16) / float(e64):>7.3f}  {vals}")


if __name__ == "__main__":
    main()
