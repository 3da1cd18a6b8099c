"""The rank-1 steering algebra of MATH.md §5, on plain tensors (no model objects).

    W_O' = W_O + γ u a,   a V = wᵀ   ⇒   F' = W_O' V = F + γ u wᵀ

``a`` is the row vector wᵀV⁺. Two ways to get it:

* ``exact`` (the paper): solve Vᵀ aᵀ = w by LU; when V is numerically singular (reciprocal
  condition estimate below ``RCOND_LSTSQ``) fall back to least squares (SVD, minimum-norm).
* ``min-norm``: a ridge fit a ≈ wᵀV⁺ on the states X that actually enter the layer,
  min ‖a V X − wᵀX‖² + α‖a‖². It only needs aV = wᵀ on the span the model uses, so it is far
  smaller than wᵀV⁻¹ when V is ill-conditioned (MiniLM: cond(V) ≈ 3·10³).

All in float64; the caller casts the result back to the model's dtype.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import scipy.linalg
import torch

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

    def to_dict(self) -> dict:
        return {"method": self.method, "cond_V": self.cond, "alpha": self.alpha, "fit_error": self.fit_error}


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
    """1-norm condition number estimate of V (inf when singular)."""
    _, _, rcond = _lu_rcond(V.detach().to(torch.float64).cpu().numpy())
    return float("inf") if rcond <= 0 else 1.0 / rcond


def exact_row(V: torch.Tensor, w: torch.Tensor) -> RowSolve:
    """a = wᵀV⁻¹ by one LU (O(d³/3), no eigen- or singular-value decomposition), least squares when
    V is singular. The condition number comes from LAPACK's 1-norm estimate on the same LU."""
    Vn = V.detach().to(torch.float64).cpu().numpy()
    wn = w.detach().to(torch.float64).cpu().numpy()
    lu, piv, rcond = _lu_rcond(Vn.T)
    if rcond > RCOND_LSTSQ:
        a = scipy.linalg.lu_solve((lu, piv), wn, check_finite=False)
        return RowSolve(torch.from_numpy(a), "solve", float(1.0 / rcond))
    # Singular (or nearly): minimum-norm least squares; report the exact 2-norm condition number.
    # Pseudo-inverse with the same relative cutoff: singular values below RCOND_LSTSQ·σ_max count as 0.
    a, _, _, sv = scipy.linalg.lstsq(Vn.T, wn, cond=RCOND_LSTSQ, lapack_driver="gelsd", check_finite=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")
    return RowSolve(torch.from_numpy(a), "lstsq", cond)


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
    scored = [(err(fit(X_fit, c * scale), X_held), c * scale) for c in alphas]
    best_err, best_alpha = min(scored)
    a = fit(torch.cat([X_fit, X_held]), best_alpha)
    return RowSolve(a, "ridge", cond_estimate(V), alpha=best_alpha, fit_error=best_err)


def delta_output(u: torch.Tensor, a: torch.Tensor, gain: float) -> torch.Tensor:
    """ΔW_O = γ u a, (d, d) in the canonical column convention (float64)."""
    return float(gain) * torch.outer(u.to(torch.float64), a.to(torch.float64))
