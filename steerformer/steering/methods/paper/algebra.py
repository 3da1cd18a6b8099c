"""The paper edit's algebra (docs/math.md §5), on plain tensors: the row a = wᵀV⁺, the top of a layer's
spectrum, and the choice of the gain from a target alignment.

    W_O' = W_O + γ u a,   a V = wᵀ   ⇒   F' = W_O' V = F + γ u wᵀ

``a`` is the row vector wᵀV⁺. Two ways to get it:

* ``exact`` (the paper): solve Vᵀ aᵀ = w by LU; when V is numerically singular (reciprocal
  condition estimate below ``RCOND_LSTSQ``) or not square (grouped-query heads, H·d_h ≠ d: V is
  (H·d_h) × d, docs/math.md §1b) the minimum-norm least squares a = wᵀV⁺ (SVD). Then aV = (Pw)ᵀ with P
  the projector onto V's row space, so F' = F + γ u (Pw)ᵀ; ``written_fraction`` = ‖Pw‖/‖w‖ says
  how much of w the layer can write at all.
* ``min-norm``: a ridge fit a ≈ wᵀV⁺ on the states X that actually enter the layer,
  min ‖a V X − wᵀX‖² + α‖a‖². It only needs aV = wᵀ on the span the model uses, so it is far
  smaller than wᵀV⁻¹ when V is ill-conditioned (MiniLM: cond(V) ≈ 3·10³).

All in float64; the caller casts the result back to the model's dtype.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.sparse.linalg
import torch

log = logging.getLogger(__name__)

#: below this reciprocal condition number (1-norm estimate) V counts as singular: least squares.
RCOND_LSTSQ = 1e-12
#: ridge strengths tried by ``min-norm``, relative to mean(diag(Z Zᵀ)) of the value states Z = V X.
ALPHA_GRID = tuple(10.0 ** k for k in range(-6, 2))


@dataclasses.dataclass
class RowSolve:
    """The row vector a (d,) with how it was obtained."""

    a: torch.Tensor
    method: str  # "solve", "lstsq", "ridge"
    cond: float  # condition number of V: LAPACK 1-norm estimate from the LU; exact 2-norm (SVD) for lstsq
    alpha: float | None = None  # ridge strength (absolute) for "ridge"
    fit_error: float | None = None  # held-out relative error ‖aVX − wᵀX‖ / ‖wᵀX‖ for "ridge"
    written_fraction: float | None = None  # ‖aV‖/‖w‖ = ‖Pw‖/‖w‖ for "lstsq" (1 for "solve")

    def to_dict(self) -> dict:
        return {"method": self.method, "cond_V": self.cond, "alpha": self.alpha, "fit_error": self.fit_error,
                "written_fraction": self.written_fraction}


def _lu_rcond(A: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """LU factors of A and LAPACK's estimate of its reciprocal 1-norm condition number (O(d²)
    after the LU: no singular value decomposition)."""
    with warnings.catch_warnings():  # an exactly singular V is handled by the caller (least squares)
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
        lu, piv = scipy.linalg.lu_factor(A, check_finite=False)
    gecon = scipy.linalg.get_lapack_funcs("gecon", (lu,))
    rcond, info = gecon(lu, np.linalg.norm(A, 1), norm="1")
    return lu, piv, float(rcond) if info == 0 else 0.0


def cond_estimate(V: torch.Tensor) -> float:
    """1-norm condition number estimate of V (inf when singular); for a non-square V (grouped-query
    heads, H·d_h ≠ d) the 2-norm σ_max/σ_min over its min(rows, columns) singular values."""
    if V.shape[0] != V.shape[1]:
        sv = torch.linalg.svdvals(V.detach().to(torch.float64).cpu())
        return float("inf") if sv[-1] <= 0 else float(sv[0] / sv[-1])
    _, _, rcond = _lu_rcond(V.detach().to(torch.float64).cpu().numpy())
    return float("inf") if rcond <= 0 else 1.0 / rcond


def exact_row(V: torch.Tensor, w: torch.Tensor) -> RowSolve:
    """a = wᵀV⁻¹ by one LU (O(d³/3), no eigen- or singular-value decomposition), least squares when
    V is singular. The condition number comes from LAPACK's 1-norm estimate on the same LU."""
    Vn = V.detach().to(torch.float64).cpu().numpy()
    wn = w.detach().to(torch.float64).cpu().numpy()
    if Vn.shape[0] == Vn.shape[1]:
        lu, piv, rcond = _lu_rcond(Vn.T)
        if rcond > RCOND_LSTSQ:
            a = scipy.linalg.lu_solve((lu, piv), wn, check_finite=False)
            return RowSolve(torch.from_numpy(a), "solve", float(1.0 / rcond), written_fraction=1.0)
    # Singular (or nearly): minimum-norm least squares; report the exact 2-norm condition number.
    # Pseudo-inverse with the same relative cutoff: singular values below RCOND_LSTSQ·σ_max count as 0.
    a, _, _, sv = scipy.linalg.lstsq(Vn.T, wn, cond=RCOND_LSTSQ, lapack_driver="gelsd", check_finite=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")
    written = float(np.linalg.norm(a @ Vn) / max(np.linalg.norm(wn), 1e-300))
    return RowSolve(torch.from_numpy(a), "lstsq", cond, written_fraction=written)


def ridge_row(V: torch.Tensor, w: torch.Tensor, X_fit: torch.Tensor, X_held: torch.Tensor,
              alphas: tuple[float, ...] = ALPHA_GRID) -> RowSolve:
    """Ridge fit of a with aV ≈ wᵀ on the states entering the layer (rows of ``X_fit``, (N, d)),
    α chosen by the relative fit error on held-out states ``X_held``; refit on all states."""
    V = V.to(torch.float64)
    w = w.to(device=V.device, dtype=torch.float64)

    def fit(X: torch.Tensor, alpha: float) -> torch.Tensor:
        Z = X @ V.T  # (N, d): value states V x
        t = X @ w  # (N,): targets wᵀx
        G = Z.T @ Z + alpha * torch.eye(Z.shape[1], dtype=Z.dtype, device=Z.device)
        return torch.linalg.solve(G, Z.T @ t)

    def err(a: torch.Tensor, X: torch.Tensor) -> float:
        t = X @ w
        return float(torch.linalg.vector_norm(X @ V.T @ a - t) / torch.linalg.vector_norm(t).clamp_min(1e-300))

    X_fit = X_fit.to(device=V.device, dtype=torch.float64)
    X_held = X_held.to(device=V.device, dtype=torch.float64)
    scale = float((X_fit @ V.T).pow(2).sum(0).mean())
    best_err, best_alpha = min((err(fit(X_fit, c * scale), X_held), c * scale) for c in alphas)
    a = fit(torch.cat([X_fit, X_held]), best_alpha)
    return RowSolve(a, "ridge", cond_estimate(V), alpha=best_alpha, fit_error=best_err)


# ---- the top of the spectrum --------------------------------------------------------------------
# Steering needs |λ1(F_L)| (to turn a strength into a gain) and reports λ1' and the gap after the
# edit. ARPACK's implicitly restarted Arnoldi ('LR': largest real part — docs/math.md §2 orders by real
# part) gets them from a few dozen matrix-vector products; small matrices, or an Arnoldi run that
# does not converge, fall back to the full ``eig``.


def top_eigenvalues(F: torch.Tensor | None, k: int = 4, *,
                    factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> np.ndarray:
    """The ``k`` eigenvalues of largest real part, sorted by real part (descending), complex128.

    ``factors`` (A, B) with F = A·B (``AttentionWeights.layer_factors()``): when r < d the nonzero
    eigenvalues come from the r × r matrix BA (docs/math.md §1b); ``F`` may be None (then F = A·B when r ≥ d)."""
    zeros = 0
    if factors is not None and factors[0].shape[1] < factors[0].shape[0]:
        A = (factors[1].detach().to(torch.float64) @ factors[0].detach().to(torch.float64)).cpu().numpy()
        # F = A·B also has d − r zero eigenvalues, ordered like any other (docs/math.md §1b)
        zeros = min(2, factors[0].shape[0] - factors[0].shape[1])
    elif F is None:
        if factors is None:
            raise TypeError("top_eigenvalues needs F or factors")
        A = (factors[0].detach().to(torch.float64) @ factors[1].detach().to(torch.float64)).cpu().numpy()
    else:
        A = F.detach().to(torch.float64).cpu().numpy()
    d = A.shape[0]
    vals = None
    if d > 32:
        try:
            v0 = np.ones(d) / np.sqrt(d)  # deterministic start
            vals = scipy.sparse.linalg.eigs(A, k=min(k, d - 2), which="LR", v0=v0, return_eigenvectors=False,
                                            maxiter=50 * d, tol=1e-10)
        except scipy.sparse.linalg.ArpackError as exc:  # no convergence, or a start vector A maps to 0
            log.info("ARPACK failed on a %dx%d matrix (%s): full eig instead", d, d, exc)
    vals = np.linalg.eigvals(A) if vals is None else vals
    vals = np.concatenate([np.asarray(vals, dtype=np.complex128), np.zeros(zeros, dtype=np.complex128)])
    return vals[np.argsort(-vals.real, kind="stable")][:k]


def top_summary(F: torch.Tensor | None, *, factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """{"lambda1": [re, im], "lambda2": [re, im], "gap": Re λ1 − Re λ2} (λ2 after the pair when
    λ1 is complex, as in docs/math.md §2)."""
    from ....spectra import spectral_summary

    s = spectral_summary(top_eigenvalues(F, 4, factors=factors))
    l1, l2 = s.lambda1, s.lambda2
    return {"lambda1": [float(l1.real), float(l1.imag)], "lambda2": [float(l2.real), float(l2.imag)],
            "gap": s.gap, "abs_lambda1": float(abs(l1))}


# ---- the gain from a target alignment ----------------------------------------------------------
# A log-grid scan, then bisection (pure: a curve in, a choice out). The alignment curve γ ↦ ρ(γ)
# is monotone in practice (the tests check it on every family), but not provably so for every
# token set; the scan therefore brackets the *first* grid point that reaches the target and
# bisects only inside that bracket, so a dip elsewhere cannot mislead it.

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
        lo, hi = (lo, mid) if f(mid) >= goal else (mid, hi)
    value = f(hi)
    if reached:
        msg = f"target alignment {target:g} reached at gain {hi:.6g} (alignment {value:.4f})"
    else:
        msg = (f"target alignment {target:g} is out of reach: the best reached is {best_val:.4f} at gain "
               f"{best_gain:.6g}; stopped at gain {hi:.6g} (alignment {value:.4f}, within {PLATEAU_TOL} of the best)")
    return StrengthChoice(gain=hi, alignment=value, reached=reached, best_alignment=best_val, best_gain=best_gain,
                          curve=sorted(seen.items()), message=msg)


__all__ = ["RowSolve", "StrengthChoice", "choose_gain", "cond_estimate", "exact_row", "ridge_row", "top_eigenvalues",
           "top_summary"]
