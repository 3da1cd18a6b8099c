"""The steering math every method may share, on plain tensors (no model objects): the edit ΔW = γ u a
of a rank-1 (or rank-k) edit, the check that a layer's value map is not all zero, and the largest gain
within a KL budget (``search_gain``: secant steps on any gain -> KL function; the addition's calibration).
A method's own math is in its folder
(``methods/paper/algebra.py``: a = wᵀV⁺ and the gain from a target alignment;
``methods/ablation/algebra.py``: the ablation of directions).

All in float64; the caller casts the result back to the model's dtype.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from ..errors import bad_argument


def check_value_map(V: torch.Tensor, layer: int, model_id: str) -> None:
    """Refuse a layer whose value map is all zero: F = W_O V = 0 whatever W_O is, so there is no
    wᵀV⁺ to solve for (the ridge system is singular) and no λ1 to scale a strength by."""
    if not bool(V.any()):
        raise bad_argument("layer", layer, "a layer whose value weights are not all zero",
                           f"Layer {layer} of {model_id} has an all-zero value map V, so an edit of W_O through it "
                           "moves nothing. Pick another layer, or check the checkpoint.")


def delta_output(u: torch.Tensor, a: torch.Tensor, gain: float) -> torch.Tensor:
    """ΔW = γ u a, (out, in) in the canonical column convention (float64); for u (out, k) and
    a (k, in), γ Σ_k u_k a_k, the k outer products added in order (elementwise: the same bytes on
    every device, unlike a matrix product)."""
    u, a = u.to(torch.float64), a.to(torch.float64)
    if u.ndim == 1:
        return float(gain) * torch.outer(u, a)
    D = float(gain) * torch.outer(u[:, 0], a[0])
    for k in range(1, u.shape[1]):
        D = D + float(gain) * torch.outer(u[:, k], a[k])
    return D


# ---- the gain within a KL budget (the addition's calibration) ------------------------------------
@dataclasses.dataclass
class GainSearch:
    """The KL budget search of one candidate: the gain, its KL and the curve evaluated."""

    gain: float
    kl: float
    scale: float  # s_ℓ: α = gain / scale
    curve: list[tuple[float, float]]  # (gain, KL)
    within_budget: bool
    message: str
    logprobs: torch.Tensor | None = dataclasses.field(default=None, repr=False)

    @property
    def reached(self) -> bool:
        return self.within_budget


def search_gain(kl_at: Callable[[float], tuple[float, torch.Tensor]], max_kl: float, scale: float, *,
                alpha0: float = 0.2, tol: float = 0.1, max_evals: int = 5, alpha_min: float = 1e-4,
                alpha_max: float = 8.0) -> GainSearch:
    """The largest gain γ = α·``scale`` with KL(γ) ≤ ``max_kl``: secant steps on log KL vs log α from
    α0, stopping within ``tol`` below the budget. The gain returned was measured within budget;
    when even α_min exceeds it, the budget is unreachable (an error naming max_kl)."""
    pts: list[tuple[float, float, torch.Tensor]] = []
    alpha, best = alpha0, None
    for _ in range(max_evals):
        kl, lp = kl_at(alpha * scale)
        pts.append((alpha, kl, lp))
        if kl <= max_kl and (best is None or alpha > best[0]):
            best = (alpha, kl, lp)
        if kl <= max_kl and (kl >= max_kl * (1 - tol) or alpha >= alpha_max):
            break
        below = [p for p in pts if p[1] <= max_kl]
        above = [p for p in pts if p[1] > max_kl]
        if below and above:  # bracketed: secant on log-log between the closest two
            (a1, k1, _), (a2, k2, _) = max(below, key=lambda p: p[0]), min(above, key=lambda p: p[0])
            power = math.log(max(k2, 1e-12) / max(k1, 1e-12)) / math.log(a2 / a1) if k1 > 0 and a2 != a1 else 2.0
            power = min(max(power, 0.5), 4.0)
            alpha = a1 * (max_kl * (1 - tol / 2) / max(k1, 1e-12)) ** (1 / power)
            alpha = min(max(alpha, a1 * 1.01), a2 * 0.99)
        else:
            alpha = alpha * (max_kl * (1 - tol / 2) / max(kl, 1e-12)) ** 0.5
        alpha = min(max(alpha, alpha_min), alpha_max)
    if best is None:  # every trial exceeded the budget: shrink until one fits (KL → 0 as α → 0)
        alpha = min(p[0] for p in pts)
        while best is None and alpha > alpha_min:
            alpha = max(alpha / 4, alpha_min)
            kl, lp = kl_at(alpha * scale)
            pts.append((alpha, kl, lp))
            if kl <= max_kl:
                best = (alpha, kl, lp)
        if best is None:
            floor = pts[-1][1]
            step = 10.0 ** (math.floor(math.log10(floor)) - 1) if floor > 0 else 0.0
            enough = math.ceil(floor / step) * step if step else floor  # rounded up to two digits
            raise bad_argument("max_kl", max_kl, f"a budget the smallest edit fits: at α = {alpha_min:g} of the "
                               f"residual norm the KL is already {floor:.3g} nats/token",
                               f"Use max_kl={enough:.2g} or more.")
    alpha, kl, lp = best
    full = alpha >= alpha_max and kl < max_kl * (1 - tol)
    message = (f"KL {kl:.3g} <= budget {max_kl:g} at gain {alpha * scale:.4g} ({alpha:.3g} x residual norm)"
               + (f"; the budget is not used up at the largest gain tried ({alpha_max:g} x residual norm)"
                  if full else ""))
    return GainSearch(gain=alpha * scale, kl=kl, scale=scale, curve=[(a * scale, k) for a, k, _ in pts],
                      within_budget=True, message=message, logprobs=lp)
