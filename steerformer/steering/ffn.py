"""FFN pre-compensation (power-method paper, Section 5).

Steering the attention output toward u does not put the layer's *output* on u: the FFN map and
the affine LayerNorms that follow deform it (on MiniLM the final states saturate near |cos| ≈ 0.78
whatever the gain). Pre-compensation solves numerically for the direction u to steer the
attention toward so that the real final states, FFN and norms included, align with the wanted u*:

    max_u  mean_i |cos(h_i(u), u*)|,   h(u) = final states with W_O + γ u a,  ‖u‖ = 1

by Adam on u (re-normalized each step) through a differentiable re-run of the cached blocks
(``torch.func.functional_call``), starting at u = u*, at a fixed gain γ.
"""

from __future__ import annotations

from typing import Callable

import torch

from .measure import ModelProbe, mean_abs_cos


def compensate(probe: ModelProbe, target: torch.Tensor, stored_for: Callable[[torch.Tensor], dict[str, torch.Tensor]],
               *, steps: int = 60, lr: float = 0.05,
               on_step: Callable[[float], None] | None = None) -> tuple[torch.Tensor, list[float]]:
    """Direction u (unit, float64) whose edit best aligns the final states with ``target``.

    ``stored_for(u)`` gives the replaced parameters (differentiable in u) for the fixed gain.
    Returns u and the alignment history (one value per step, the first at u = target)."""
    u = target.detach().clone().to(torch.float64).requires_grad_(True)
    opt = torch.optim.Adam([u], lr=lr)
    history: list[float] = []
    best = (-1.0, target.detach().clone())
    for _ in range(steps):
        unit = u / u.norm()
        h = probe.final_states(stored_for(unit))
        score = mean_abs_cos(h, target, probe.mask)
        val = float(score.detach())
        history.append(val)
        if on_step is not None:
            on_step(val)
        if val > best[0]:
            best = (val, unit.detach().clone())
        opt.zero_grad()
        (-score).backward()
        opt.step()
    return best[1], history
