"""How close the tokens of each prompt are to consensus (pure tensor functions, docs/math.md §6).

E has two precisions (``e_precision``):

- ``"float64"`` (default): E in float64 as a sum of squared differences (1 − ⟨a, b⟩ = ‖a − b‖²/2
  for unit vectors) rather than 1 minus a cosine: near consensus E goes to 1e-10 and below, where
  1 − cos would be rounding noise (even negative) while the squared differences keep their
  relative accuracy.
- ``"states"``: the reference code's own arithmetic, in the states' dtype (fp16 in the paper's
  runs), so a run reproduces the paper's curves down to their floor. cyphylab/GPT-Consensus,
  ``GPTConsensus.py``, ``consensus()``::

      hn = hidden[batch_idx]
      y1 = hn / hn.norm(dim=1, keepdim=True)
      aux = y1[0] @ y1.T
      diag[batch_idx, idx + layer_idx] = 1-aux.mean()

  (signed: no absolute value, although the docstring says "mean absolute cosine similarity";
  ``diag`` is float32, so the fp16 result is stored as float32).

The pairwise cosine and the centroid distance run in the states' own precision (float32 at least:
fp16/bf16 states are upcast), in the squared-difference form.
"""

from __future__ import annotations

import torch

from ..consensus import consensus_error
from ..errors import bad_argument


#: Precisions of E (``--e-precision``); the first is the default.
E_PRECISIONS = ("float64", "states")


def reference_e(h: torch.Tensor) -> torch.Tensor:
    """E exactly as the reference code computes it, in ``h``'s dtype: per prompt,
    1 − mean_i ⟨y_1, y_i⟩ with y = h / ‖h‖ (see the module docstring)."""
    # One prompt at a time, as the reference does: a batched product sums in another order and
    # differs in the last bit.
    flat = h.reshape(-1, *h.shape[-2:])
    out = torch.empty(flat.shape[0], dtype=h.dtype, device=h.device)
    for i, hn in enumerate(flat):
        y1 = hn / hn.norm(dim=1, keepdim=True)
        out[i] = 1 - (y1[0] @ y1.T).mean()
    return out.reshape(h.shape[:-2])


def consensus_stats(h: torch.Tensor, e_precision: str = "float64") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For hidden states ``h`` (..., n, d) of one block, per prompt (shape (...,)):

    - ``E`` of eq. (9) on the row-normalized states y_i = h_i / ‖h_i‖:
      E = 1 − (1/n) Σ_i ⟨y_1, y_i⟩ = (1/n) Σ_i ‖y_1 − y_i‖² / 2 (i = 1 included), in float64
      (``e_precision="float64"``) or with the reference code's arithmetic in the states' dtype
      (``"states"``);
    - the mean pairwise cosine over pairs i ≠ j, 1 − Σ_i ‖y_i − c‖² / (n − 1) with the centroid
      c = (1/n) Σ_i y_i (because Σ_{i,j} ‖y_i − y_j‖² = 2n Σ_i ‖y_i − c‖²); 1 when n = 1;
    - the mean distance to the centroid, (1/n) Σ_i ‖y_i − c‖.
    """
    if e_precision not in E_PRECISIONS:
        raise bad_argument("e_precision", e_precision, f"one of {', '.join(E_PRECISIONS)}")
    x = h.to(torch.float64 if h.dtype == torch.float64 else torch.float32)
    n = x.shape[-2]
    y = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    e = consensus_error(h.to(torch.float64)) if e_precision == "float64" else reference_e(h)
    e = e.to(x.dtype)
    r = torch.linalg.vector_norm(y - y.mean(-2, keepdim=True), dim=-1)  # ‖y_i − c‖
    pairwise = 1.0 - r.square().sum(-1) / (n - 1) if n > 1 else torch.ones_like(e)
    return e, pairwise, r.mean(-1)
