"""Paper mode of the steering (docs/steering.md): the power-method paper's §2.3 taken literally —
exact solve a = wᵀV⁻¹, gain γ = s·|λ1(F_L)| with w = u, alignment measured in the controlled
dynamics (eq. (1), 30 × 10 random unit tokens, seed 0) — on the bundled real MiniLM, last layer,
a random unit direction u (seed 0), s = 1, 10, 100, 1000.

    python benchmarks/paper_mode.py [--strengths 1,10,100,1000] [--smoke]

For each s it prints γ, the record's own dynamics alignment and an independent one: the edited
model run through `run_dynamics` from scratch, mean |⟨x_i(L), u⟩| over the 300 final tokens, and
that alignment ÷ the unsteered model's (the baseline, same run).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch

from steerformer.dynamics import random_tokens, run_dynamics
from steerformer.loading import load_model
from steerformer.steering import steer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strengths", default="1,10,100,1000")
    ap.add_argument("--smoke", action="store_true", help="one strength: what the test suite runs")
    args = ap.parse_args()
    if args.smoke:
        args.strengths = "10"
    g = torch.Generator().manual_seed(0)
    u = torch.randn(384, generator=g, dtype=torch.float64)
    u /= u.norm()
    x0 = random_tokens(30, 10, 384, seed=0)
    base = run_dynamics(load_model("minilm"), x0).states[-1]
    print(f"MiniLM, last layer, random u; before steering: mean rho(x_out, u) = {float((base @ u).abs().mean()):.3f}")
    rho0 = float((base @ u).abs().mean())
    print(f"{'s':>6} {'gamma':>10} {'rho (record)':>13} {'rho (independent)':>18} {'ratio to unsteered':>19}")
    for s in (float(v) for v in args.strengths.split(",")):
        model = load_model("minilm")
        rec = steer(model, direction=u.numpy(), strength=s, solve="exact", measure="dynamics")
        x = run_dynamics(model, x0).states[-1]
        rho = float((x @ u).abs().mean())
        print(f"{s:>6g} {rec.gain:>10.4g} {rec.details.alignment_dynamics_after:>13.3f} {rho:>18.3f} {rho / rho0:>19.2f}")


if __name__ == "__main__":
    main()
