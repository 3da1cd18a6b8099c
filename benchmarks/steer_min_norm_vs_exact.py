"""What the edit really applies, on the bundled MiniLM: ``solve="min-norm"`` vs ``"exact"`` (the
paper's F' = F + γ u wᵀ). Any edit ΔW_O = γ u a gives F' = F + γ u w_effᵀ with w_eff = Vᵀaᵀ
(docs/math.md §5b); this prints, for a random unit u = w on the last layer at fixed nominal strengths
s (γ = s·|λ1|) and at the default target alignment 0.99: cos(w_eff, w), the effective strength
γ|w_effᵀu|/|λ1|, λ1 of F' vs the predicted λ1 + γ w_effᵀu, ‖ΔW_O‖/‖W_O‖, the bias shift
‖γ(a·b_V)u‖, the real-model alignment on held-out sentences, and the ratio of the effective to the
nominal strength (what the edit applies ÷ what was asked).
Run: python benchmarks/steer_min_norm_vs_exact.py [--seed K] [--smoke]  (about a minute on 2 cores;
--smoke: strength 10, exact solve only)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from steerformer.loading import load_model
from steerformer.steering import steer, unsteer


def main(seed: int = 0, smoke: bool = False) -> None:
    model = load_model("minilm")
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(model.config.hidden_size, generator=g, dtype=torch.float64)
    print("| setting | solve | nominal s | cos(w_eff, w) | effective s | λ1(F') | λ1 + γ w_effᵀu | ‖ΔW_O‖/‖W_O‖ | "
          "bias shift ‖γ(a·b_V)u‖ | real-model align. | ratio effective/nominal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for setting in ("strength 10",) if smoke else ("strength 10", "strength 100", "target 0.99"):
        for solve in ("exact",) if smoke else ("exact", "min-norm"):
            kw = {"strength": float(setting.split()[1])} if setting.startswith("strength") else {}
            r = steer(model, u, solve=solve, **kw)
            e = r.edit
            pred = r.details.spectrum_before["lambda1"][0] + e.gain * float(e.w_eff @ e.u)
            print(f"| {setting} | {solve} | {r.details.strength:.4g} | {r.details.w_eff_cos:.3f} | {r.details.effective_strength:.4g} | "
                  f"{r.details.spectrum_after['lambda1'][0]:.4g} | {pred:.4g} | {r.weight_change:.3g} | {r.details.bias_shift_norm:.3g} | "
                  f"{r.alignment_model_before:.3f} → {r.alignment_model_after:.3f} | "
                  f"{r.details.effective_strength / r.details.strength:.3f} |")
            unsteer(model)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random direction u")
    ap.add_argument("--smoke", action="store_true", help="strength 10 only: what the test suite runs")
    args = ap.parse_args()
    main(args.seed, args.smoke)
