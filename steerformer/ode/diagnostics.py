"""Measurements on token states: E (eq. 9), the Lyapunov function V (eq. 7), the hemisphere
test, Wendel's probability and its Monte Carlo check, consensus detection, alignment.

All take tokens as rows, shape (..., n, d), and reduce the token axis.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import linprog, nnls

from ..consensus import consensus_error as _consensus_error
from ..errors import bad_argument
from .geometry import as_tensor


def consensus_error(y: object) -> torch.Tensor:
    """E = 1 − (1/n) Σ_i ⟨y_1, y_i⟩ / (‖y_1‖ ‖y_i‖), i = 1 included (consensus paper eq. 9)."""
    return _consensus_error(as_tensor(y, "y"))


def lyapunov(y: object, v: object) -> torch.Tensor:
    """V(y) = max_i (1 − vᵀ y_i) (eq. 7), for v in the hemisphere the tokens start in."""
    yt, vt = as_tensor(y, "y"), as_tensor(v, "v")
    if vt.shape != yt.shape[-1:]:
        raise bad_argument("v", f"shape {tuple(vt.shape)}", f"a vector of length d={yt.shape[-1]}")
    return (1.0 - yt @ vt).amax(-1)


def alignment(y: object, v: object) -> torch.Tensor:
    """ρ(y_i, v) = |⟨y_i, v⟩| / (‖y_i‖‖v‖) per token (docs/math.md §4)."""
    yt, vt = as_tensor(y, "y"), as_tensor(v, "v")
    if vt.shape != yt.shape[-1:]:
        raise bad_argument("v", f"shape {tuple(vt.shape)}", f"a vector of length d={yt.shape[-1]}")
    return (yt @ vt).abs() / (torch.linalg.vector_norm(yt, dim=-1) * torch.linalg.vector_norm(vt))


def hemisphere_witness(y: object) -> np.ndarray | None:
    """A vector v with vᵀy_i > 0 for every token (an open hemisphere containing them), or None.

    Solved as the linear programme max s subject to vᵀy_i ≥ s, −1 ≤ v ≤ 1.
    """
    Y = as_tensor(y, "y").cpu().numpy()
    if Y.ndim != 2:
        raise bad_argument("y", f"shape {Y.shape}", "one configuration of shape (n, d)")
    n, d = Y.shape
    # variables (v, s): minimise −s; constraints −y_iᵀv + s ≤ 0
    c = np.zeros(d + 1)
    c[-1] = -1.0
    A = np.hstack([-Y, np.ones((n, 1))])
    res = linprog(c, A_ub=A, b_ub=np.zeros(n), bounds=[(-1, 1)] * d + [(None, 1)], method="highs")
    if res.status != 0 or -res.fun <= 1e-12:
        return None
    return res.x[:d]


def in_open_hemisphere(y: object) -> bool:
    """True if all tokens lie in some open hemisphere {x : vᵀx > 0}."""
    return hemisphere_witness(y) is not None


def _origin_in_hull(Y: np.ndarray) -> bool:
    """Gordan: no open hemisphere holds the points iff 0 ∈ conv{y_i}; test with one NNLS.

    min_{λ≥0} ‖Yᵀλ‖² + (Σλ − 1)² is 0 exactly when 0 is a convex combination of the points.
    """
    A = np.vstack([Y.T, np.ones((1, Y.shape[0]))])
    b = np.zeros(A.shape[0])
    b[-1] = 1.0
    _, resid = nnls(A, b)
    return resid < 1e-9


def wendel_probability(n_points: int, n: int) -> float:
    """P(ℓ uniform points on S^n ⊂ R^{n+1} lie in one open hemisphere) = 2^{−(ℓ−1)} Σ_{μ=0}^{n} C(ℓ−1, μ).

    Wendel (1962) states it for N points in R^k as 2^{−N+1} Σ_{μ=0}^{k−1} C(N−1, μ); on S^n
    the ambient dimension is k = n + 1, so the sum runs to **n**. The consensus paper (Remark
    3.4) prints the sum to n − 1 — off by one: it would give 1/2 for two points on the circle
    (ℓ = 2, n = 1), which always lie in a common open half-plane (probability 1).
    """
    if int(n_points) != n_points or n_points < 1:
        raise bad_argument("n_points", n_points, "an integer ℓ ≥ 1")
    if int(n) != n or n < 1:
        raise bad_argument("n", n, "the sphere's dimension n ≥ 1 (points in R^{n+1})")
    ell, n = int(n_points), int(n)
    total = sum(math.comb(ell - 1, mu) for mu in range(0, min(n, ell - 1) + 1))
    return total / 2 ** (ell - 1)


def wendel_monte_carlo(
    n_points: int, n: int, *, samples: int = 4000, seed: int = 0
) -> tuple[float, float]:
    """Monte Carlo estimate (p̂, standard error) of :func:`wendel_probability`: Gaussian points
    normalized to S^n, tested with the convex-hull criterion (independent of the formula)."""
    if int(samples) != samples or samples < 1:
        raise bad_argument("samples", samples, "an integer ≥ 1")
    rng = np.random.default_rng(seed)
    pts = rng.standard_normal((int(samples), int(n_points), int(n) + 1))
    pts /= np.linalg.norm(pts, axis=-1, keepdims=True)
    hits = sum(not _origin_in_hull(P) for P in pts)
    p = hits / samples
    return p, math.sqrt(max(p * (1 - p), 1e-300) / samples)


def consensus_reached(y: object, tol: float = 1e-6) -> torch.Tensor:
    """True (per run) when every token is within ``tol`` of the first: max_i ‖y_i − y_1‖ < tol."""
    yt = as_tensor(y, "y")
    return torch.linalg.vector_norm(yt - yt[..., :1, :], dim=-1).amax(-1) < tol


def consensus_time(ts: object, values: object, tol: float = 1e-6) -> np.ndarray:
    """First saved time after which ``values`` (e.g. E, shape (T, ...)) stays below tol; NaN if never."""
    t = as_tensor(ts, "ts").cpu().numpy()
    v = as_tensor(values, "values").cpu().numpy()
    if v.shape[0] != t.shape[0]:
        raise bad_argument("values", f"{v.shape[0]} rows", f"one per time ({t.shape[0]})")
    below = v < tol
    # stays below from index k on: reverse cumulative AND
    stays = np.flip(np.logical_and.accumulate(np.flip(below, 0), 0), 0)
    first = np.argmax(stays, axis=0)
    out = t[first].astype(float)
    return np.where(stays.any(axis=0), out, np.nan)
