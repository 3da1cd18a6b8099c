"""How far two raters agree (a judge against hand labels; docs/steering-chat.md, "The judge"):
exact agreement, Cohen's κ, precision and recall of a yes/no call, and Spearman's rank correlation.
Pure Python on sequences; no torch.
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

from ...errors import bad_argument


def _paired(a: Sequence, b: Sequence, what: str) -> tuple[list, list]:
    a, b = list(a), list(b)
    if len(a) != len(b) or not a:
        raise bad_argument(what, f"{len(a)} and {len(b)} values", "two non-empty sequences of the same length")
    return a, b


def exact_agreement(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """The share of positions where ``a`` and ``b`` hold the same rating."""
    a, b = _paired(a, b, "ratings")
    return sum(x == y for x, y in zip(a, b)) / len(a)


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ of two raters on the same items: (p_o − p_e) / (1 − p_e), p_o the exact agreement,
    p_e = Σ_k p_a(k)·p_b(k) the agreement expected by chance from each rater's share of category k.
    1 when both raters use one and the same category throughout (p_e = 1: nothing to tell apart)."""
    a, b = _paired(a, b, "ratings")
    n = len(a)
    p_e = sum((a.count(k) / n) * (b.count(k) / n) for k in set(a) | set(b))
    return 1.0 if p_e >= 1.0 else (exact_agreement(a, b) - p_e) / (1.0 - p_e)  # (p_o − p_e) / (1 − p_e)


def precision_recall(predicted: Sequence[bool], truth: Sequence[bool]) -> tuple[float, float]:
    """Of the items ``predicted`` yes, the share that are yes in ``truth`` (precision); of the yes
    items of ``truth``, the share predicted yes (recall). nan when a denominator is 0."""
    p, t = _paired([bool(x) for x in predicted], [bool(x) for x in truth], "calls")
    hits = sum(x and y for x, y in zip(p, t))
    n_pred, n_true = sum(p), sum(t)
    return (hits / n_pred if n_pred else math.nan, hits / n_true if n_true else math.nan)


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values`` (smallest 1); tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's ρ: Pearson's correlation of the rank vectors (ties at mean rank); nan when either
    sequence is constant."""
    a, b = _paired(a, b, "values")
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else math.nan


__all__ = ["cohen_kappa", "exact_agreement", "precision_recall", "ranks", "spearman"]
