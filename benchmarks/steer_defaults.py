"""Evidence for steer()'s defaults on the bundled MiniLM: every (measure, solve) pair, plus FFN
pre-compensation, steering the last layer toward a random unit direction (w = u) with the target
alignment 0.99. Prints a markdown table: real-model alignment on held-out sentences, controlled
dynamics alignment, weight change, KL (embedding readout, MiniLM has no head) and alignment per
unit of KL, and the alignment ratio after ÷ before (the unsteered model: the baseline, same run).
Run: python benchmarks/steer_defaults.py [--seed K] [--no-ffn] [--smoke]  (2-3 minutes on 2 cores;
--smoke: the first setting only)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from steerformer.loading import load_model
from steerformer.steering import steer, unsteer


def main(seed: int = 0, ffn: bool = True, smoke: bool = False) -> None:
    model = load_model("minilm")
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(model.config.hidden_size, generator=g, dtype=torch.float64)
    rows = []
    settings = [  # (measure, solve, through_ffn, target)
        ("model", "min-norm", False, 0.99), ("model", "exact", False, 0.99),
        ("model", "min-norm", True, 0.99), ("model", "exact", True, 0.99),
        ("dynamics", "min-norm", False, 0.99), ("dynamics", "exact", False, 0.99),
        ("model", "min-norm", False, 0.75), ("model", "exact", False, 0.75),
    ]
    for measure, solve, through, target in settings[:1] if smoke else settings:
        if through and not ffn:
            continue
        t = time.perf_counter()
        r = steer(model, u, measure=measure, solve=solve, through_ffn=through, target_alignment=target)
        dt = time.perf_counter() - t
        unsteer(model)
        rows.append((measure, solve, through, target, r, dt))
    print("| measure | solve | through_ffn | target | strength | real-model align. (held-out) | dynamics align. | "
          "‖ΔW_O‖/‖W_O‖ | KL | align. gain per KL | target reached | time s | ratio after/before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for measure, solve, through, target, r, dt in rows:
        per = (r.alignment_model_after - r.alignment_model_before) / max(r.kl, 1e-12)
        print(f"| {measure} | {solve} | {through} | {target} | {r.details.strength:.4g} | {r.alignment_model_before:.3f} → "
              f"{r.alignment_model_after:.3f} | {r.details.alignment_dynamics_before:.3f} → {r.details.alignment_dynamics_after:.3f} | "
              f"{r.weight_change:.3g} | {r.kl:.3g} | {per:.3g} | {r.details.target_reached} | {dt:.1f} | "
              f"{r.alignment_model_after / r.alignment_model_before:.2f} |")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random direction u")
    ap.add_argument("--no-ffn", action="store_true", help="skip the (slower) through_ffn rows")
    ap.add_argument("--smoke", action="store_true", help="the first setting only: what the test suite runs")
    args = ap.parse_args()
    main(args.seed, not args.no_ffn, args.smoke)
