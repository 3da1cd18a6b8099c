"""How close the tokens of each prompt are to consensus (pure tensor functions, MATH.md §6).

Everything is computed from a few reductions over the hidden states (norms, dot products with
the first token and with the sum), so that measuring after every block costs a few memory passes
over the states, far less than the block itself. The reductions run in float64 whatever the model
dtype: E near consensus is 1 minus a number near 1, and float32 would floor it at ~1e-7.
"""

from __future__ import annotations

import torch


def _stat_dtype(h: torch.Tensor) -> torch.dtype:
    # MPS has no float64; everywhere else the reductions are cheap enough in double precision.
    return torch.float32 if h.device.type == "mps" else torch.float64


def consensus_stats(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For hidden states ``h`` (..., n, d) of one block, per prompt (shape (...,)):

    - ``E`` of eq. (9) on the row-normalized states y_i = h_i / ‖h_i‖:
      E = 1 − (1/n) Σ_i ⟨y_1, y_i⟩ (i = 1 included);
    - the mean pairwise cosine over pairs i ≠ j, (‖Σ_i y_i‖² − n) / (n(n − 1)) (1 when n = 1);
    - the mean distance of the y_i to their centroid c = (1/n) Σ_i y_i, with
      ‖y_i − c‖² = 1 − 2⟨y_i, c⟩ + ‖c‖².
    """
    x = h.to(_stat_dtype(h))
    n = x.shape[-2]
    r = torch.linalg.vector_norm(x, dim=-1)  # (..., n)
    inv = 1.0 / r
    g = torch.einsum("...nd,...d->...n", x, x[..., 0, :])  # ⟨h_i, h_1⟩
    e = 1.0 - (g * inv * inv[..., :1]).mean(-1)
    s = torch.einsum("...n,...nd->...d", inv, x)  # Σ_i y_i
    ss = (s * s).sum(-1)
    pairwise = (ss - n) / (n * (n - 1)) if n > 1 else torch.ones_like(ss)
    c_dot = torch.einsum("...nd,...d->...n", x, s) * inv / n  # ⟨y_i, c⟩
    dist = torch.sqrt(torch.clamp(1.0 - 2.0 * c_dot + (ss / (n * n))[..., None], min=0.0)).mean(-1)
    return e, pairwise, dist
