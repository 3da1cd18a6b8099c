"""The test behind "beyond chance" (docs/math.md §4c): Monte Carlo p-values against the null draws and a
correction across layers.

- p-value of an observed statistic t among K null draws t_1..t_K (one-sided, large is extreme):
  (1 + #{s : t_s ≥ t}) / (K + 1). Ties count against the layer. Under the null model the observed
  layer is one more draw, exchangeable with the K, so P(p ≤ a) ≤ a for every a — and no p-value is
  below 1/(K + 1).
- Correction across the layers of one run: Benjamini–Hochberg by default, Holm as the option.
  Why BH: the claim a run makes is a *set* of layers (the ones beyond chance); BH keeps the expected
  share of false layers in that set at α, which is the guarantee a reader of that set needs, and it
  has the power to find the many layers the papers expect. Holm keeps the chance of any false layer
  at α, valid whatever the dependence between layers, but its first step needs p < α/L: with
  K draws that is out of reach for one lone layer unless K + 1 > L/α (120 draws for MiniLM's 6
  layers, 600 for SmolLM2's 30), while BH's i-th smallest p-value only needs i·α/L. BH assumes
  p-values that are independent or positively dependent (the layers share the tokens and the
  chained dynamics; nothing suggests negative dependence). When every layer is null — the tiny
  random models of the tests — the two control the same thing: the chance of any flag.
"""

from __future__ import annotations

import numpy as np

from ..configs import CORRECTIONS
from ..errors import bad_argument


def monte_carlo_p(observed: np.ndarray, null: np.ndarray) -> np.ndarray:
    """(1 + #{draws ≥ observed}) / (K + 1) per column: ``observed`` (m,), ``null`` (K, m). A NaN
    observation gives NaN."""
    obs = np.asarray(observed, dtype=float)
    draws = np.asarray(null, dtype=float)
    p = (1.0 + (draws >= obs[None, :]).sum(0)) / (draws.shape[0] + 1.0)
    return np.where(np.isnan(obs), np.nan, p)


def _family(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output filled with NaN, the p-values as floats, the non-NaN positions sorted by p-value)."""
    p = np.asarray(p, dtype=float)
    ok = np.flatnonzero(~np.isnan(p))
    return np.full_like(p, np.nan), p, ok[np.argsort(p[ok], kind="stable")]


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error), NaN entries left out of the family."""
    out, p, order = _family(p)
    m = order.size
    out[order] = np.minimum(np.maximum.accumulate((m - np.arange(m)) * p[order]), 1.0)
    return out


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (false discovery rate), NaN entries left out."""
    out, p, order = _family(p)
    scaled = p[order] * order.size / np.arange(1, order.size + 1)
    out[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return out


def adjust(p: np.ndarray, correction: str) -> np.ndarray:
    """``p`` adjusted across layers by ``correction`` ("bh" or "holm")."""
    if correction == "bh":
        return benjamini_hochberg(p)
    if correction == "holm":
        return holm(p)
    raise bad_argument("correction", correction, f"one of {', '.join(CORRECTIONS)}")
