"""How close the tokens of each prompt are to consensus (pure tensor functions, MATH.md §6).

The statistics run in the states' own precision (float32 at least: fp16/bf16 states are upcast)
and are written as sums of squared differences (1 − ⟨a, b⟩ = ‖a − b‖²/2 for unit vectors) rather
than 1 minus a cosine: near consensus E goes to 1e-10 and below, where 1 − cos would be rounding
noise (even negative) while the squared differences keep their relative accuracy.
"""

from __future__ import annotations

import torch

from ..consensus import consensus_error


def _stat_dtype(h: torch.Tensor) -> torch.dtype:
    return torch.float64 if h.dtype == torch.float64 else torch.float32


def consensus_stats(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For hidden states ``h`` (..., n, d) of one block, per prompt (shape (...,)):

    - ``E`` of eq. (9) on the row-normalized states y_i = h_i / ‖h_i‖:
      E = 1 − (1/n) Σ_i ⟨y_1, y_i⟩ = (1/n) Σ_i ‖y_1 − y_i‖² / 2 (i = 1 included);
    - the mean pairwise cosine over pairs i ≠ j, 1 − Σ_i ‖y_i − c‖² / (n − 1) with the centroid
      c = (1/n) Σ_i y_i (because Σ_{i,j} ‖y_i − y_j‖² = 2n Σ_i ‖y_i − c‖²); 1 when n = 1;
    - the mean distance to the centroid, (1/n) Σ_i ‖y_i − c‖.
    """
    x = h.to(_stat_dtype(h))
    n = x.shape[-2]
    y = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    e = consensus_error(y)
    r = torch.linalg.vector_norm(y - y.mean(-2, keepdim=True), dim=-1)  # ‖y_i − c‖
    pairwise = 1.0 - r.square().sum(-1) / (n - 1) if n > 1 else torch.ones_like(e)
    return e, pairwise, r.mean(-1)
