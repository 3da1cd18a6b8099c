"""The discrete map of both papers, once: x⁺ = N_W(x + τ G), with G = Σ_h F_h Σ_j A^h_ij x_j the
attention update. :func:`steerformer.dynamics.dynamics_step` (the model's own layers) and
:func:`steerformer.ode.fields.discrete_step` (the reference ODE module) both end here.
"""

from __future__ import annotations

import torch


def w_norm(y: torch.Tensor, W: torch.Tensor | None = None) -> torch.Tensor:
    """|y_i|_W = sqrt(y_iᵀ W y_i) for every token (last axis reduced, kept as size 1); W = None: ‖y_i‖₂."""
    if W is None:
        return torch.linalg.vector_norm(y, dim=-1, keepdim=True)
    return torch.sqrt((y * (y @ W)).sum(-1, keepdim=True))


def residual_map(x: torch.Tensor, update: torch.Tensor, *, tau: float = 1.0,
                 W: torch.Tensor | None = None) -> torch.Tensor:
    """x⁺ = N_W(x + τ·update): skip connection plus the scaled attention update, each token
    projected back to the W-ellipsoid (W = None: the unit sphere). Pure and differentiable."""
    z = x + tau * update
    return z / w_norm(z, W)
