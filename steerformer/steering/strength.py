"""Choosing the gain from a target alignment: log-grid scan, then bisection (pure: a curve in,
a choice out).

The alignment curve γ ↦ ρ(γ) is monotone in practice (the tests check it on every family), but
not provably so for every token set; the scan therefore brackets the *first* grid point that
reaches the target and bisects only inside that bracket, so a dip elsewhere cannot mislead it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

#: strengths s (γ = s·|λ1|) scanned: half-decades from 10⁻² to 10⁵.
DEFAULT_GRID = tuple(10.0 ** (k / 2) for k in range(-4, 11))
#: when the target is out of reach, stop at the smallest gain within this of the best alignment.
PLATEAU_TOL = 0.005


@dataclasses.dataclass
class StrengthChoice:
    gain: float
    alignment: float
    reached: bool
    best_alignment: float
    best_gain: float
    curve: list[tuple[float, float]]  # every (gain, alignment) evaluated, sorted by gain
    message: str


def choose_gain(curve: Callable[[float], float], target: float, *, scale: float = 1.0,
                grid: tuple[float, ...] = DEFAULT_GRID, rel_tol: float = 0.02, max_iter: int = 40) -> StrengthChoice:
    """Smallest gain (to ``rel_tol`` relative) with ``curve(gain) >= target``; gains are
    ``scale * grid``. Unreachable: the smallest gain within ``PLATEAU_TOL`` of the best reached."""
    seen: dict[float, float] = {}

    def f(g: float) -> float:
        if g not in seen:
            seen[g] = float(curve(g))
        return seen[g]

    gains: list[float] = []
    values: list[float] = []
    for s in grid:  # ascending; stop at the first gain that reaches the target
        gains.append(scale * s)
        values.append(f(gains[-1]))
        if values[-1] >= target:
            break
    best_i = max(range(len(values)), key=values.__getitem__)
    best_val, best_gain = values[best_i], gains[best_i]
    reached = values[-1] >= target
    goal = target if reached else best_val - PLATEAU_TOL
    hi_i = next(i for i, v in enumerate(values) if v >= goal)
    lo, hi = (gains[hi_i - 1], gains[hi_i]) if hi_i > 0 else (0.0, gains[0])
    for _ in range(max_iter):
        if hi - lo <= rel_tol * hi:
            break
        mid = math.sqrt(lo * hi) if lo > 0 else hi / 2
        if f(mid) >= goal:
            hi = mid
        else:
            lo = mid
    value = f(hi)
    if reached:
        msg = f"target alignment {target:g} reached at gain {hi:.6g} (alignment {value:.4f})"
    else:
        msg = (f"target alignment {target:g} is out of reach: the best reached is {best_val:.4f} at gain "
               f"{best_gain:.6g}; stopped at gain {hi:.6g} (alignment {value:.4f}, within {PLATEAU_TOL} of the best)")
    return StrengthChoice(gain=hi, alignment=value, reached=reached, best_alignment=best_val, best_gain=best_gain,
                          curve=sorted(seen.items()), message=msg)
