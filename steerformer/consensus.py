"""E of the consensus paper's eq. (9), shared by the ODE module and the looped-model measurement."""

from __future__ import annotations

import torch


def consensus_error(y: torch.Tensor) -> torch.Tensor:
    """E = 1 − (1/n) Σ_i ⟨y_1, y_i⟩ / (‖y_1‖ ‖y_i‖) over the token axis of ``y`` (..., n, d),
    i = 1 included; E → 0 is consensus.

    Written as (1/n) Σ_i ‖u_1 − u_i‖² / 2 on the normalized rows u (equal for unit vectors): near
    consensus E reaches 1e-10 and below, where 1 − cos would be rounding noise, even negative.
    """
    u = y / torch.linalg.vector_norm(y, dim=-1, keepdim=True)
    return 0.5 * (u - u[..., :1, :]).square().sum(-1).mean(-1)
