"""The steering math on plain tensors (no model objects): the row a = wᵀV⁺, the edit ΔW_O = γ u a,
the top of a layer's spectrum, the choice of the gain from a target alignment, and the largest gain
within a KL budget (``search_gain``: secant steps on any gain -> KL function; the addition's
calibration and the judged strength's KL ladder both use it).

The rank-1 algebra (docs/math.md §5):

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


def check_value_map(V: torch.Tensor, layer: int, model_id: str) -> None:
    """Refuse a layer whose value map is all zero: F = W_O V = 0 whatever W_O is, so there is no
    wᵀV⁺ to solve for (the ridge system is singular) and no λ1 to scale a strength by."""
    if not bool(V.any()):
        from ..errors import bad_argument

        raise bad_argument("layer", layer, "a layer whose value weights are not all zero",
                           f"Layer {layer} of {model_id} has an all-zero value map V, so an edit of W_O through it "
                           "moves nothing. Pick another layer, or check the checkpoint.")


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


# ---- directional ablation (docs/math.md §5b, §5e) -----------------------------------------------------
#: directions whose smallest singular value (rows normalized) is below this share of the largest
#: are linearly dependent: refused, not silently orthonormalized into noise
DEPENDENT_TOL = 1e-6
#: the norm-preserving variants: "rows" keeps ‖W_i,:‖ (Heretic's default "full" row normalization:
#: each residual coordinate's incoming weights), "columns" keeps ‖W_:,j‖ (each output vector)
NORM_PRESERVING = ("rows", "columns")


def orthonormal_directions(D: torch.Tensor, *, tol: float = DEPENDENT_TOL, name: str = "direction") -> torch.Tensor:
    """U (d, k) with orthonormal columns spanning the rows of ``D`` (k, d), float64: the rows
    normalized, then Q of their QR with column i signed like row i (so U's first column is the
    first direction). One row is returned as it is normalized, with no QR (the same bytes as a
    single direction has always had). Linearly dependent rows are refused."""
    from ..errors import bad_argument

    D = D.to(torch.float64)
    D = D.reshape(1, -1) if D.ndim == 1 else D
    norms = torch.linalg.vector_norm(D, dim=1, keepdim=True)
    if D.shape[0] == 1:  # a unit vector (to rounding) is kept as it is: the same bytes, the same edit
        return D[0] if abs(float(norms) - 1.0) <= 1e-15 else D[0] / norms[0]
    rows = D / norms
    sv = torch.linalg.svdvals(rows)
    if not float(sv[-1]) > tol * float(sv[0]):
        raise bad_argument(name, f"{rows.shape[0]} vectors with singular values {float(sv[0]):.3g} .. {float(sv[-1]):.3g}",
                           f"linearly independent directions (smallest / largest singular value "
                           f"{float(sv[-1] / sv[0]):.2g} <= {tol:g}: one is a combination of the others)",
                           "Drop the dependent directions (or orthonormalize them yourself).")
    Q, R = torch.linalg.qr(rows.T)
    return Q * torch.sign(torch.diagonal(R))[None, :]


@dataclasses.dataclass
class Ablation:
    """W' = diag(r) W diag(c) + γ u a (and b' = b + δ): the factors of one writer's ablation, and the
    residue ‖UᵀW'‖_F / ‖UᵀW‖_F of what is left along U (1 − s for the plain projection)."""

    u: torch.Tensor  # (out,) or (out, k)
    a: torch.Tensor  # (in,) or (k, in)
    gain: float  # −s
    row_scale: torch.Tensor | None
    col_scale: torch.Tensor | None
    bias_delta: torch.Tensor | None
    residue: float

    def weight(self, W: torch.Tensor) -> torch.Tensor:
        """W' for the W these factors were made from (float64; for reports and tests)."""
        out = W.to(torch.float64)
        if self.row_scale is not None:
            out = out * self.row_scale[:, None]
        if self.col_scale is not None:
            out = out * self.col_scale[None, :]
        return out + delta_output(self.u, self.a, self.gain)


def _rows(U: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """UᵀM row by row (a = u @ M for one direction: the vector-matrix product ablation always used)."""
    return U @ M if U.ndim == 1 else torch.stack([U[:, i] @ M for i in range(U.shape[1])])


def _safe_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den, 0 where den = 0 (a row or column that is zero stays zero)."""
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))


def ablation(W: torch.Tensor, U: torch.Tensor, s: float, *, norm_preserving: str | None = None,
             b: torch.Tensor | None = None) -> Ablation:
    """The ablation of the directions U (orthonormal columns (d, k), or one unit vector (d,)) from
    W (d, in), float64, with P = UUᵀ (docs/math.md §5e):

    * plain: W' = (I − sP) W = W + (−s) U (UᵀW): rank k, exactly a LoRA (B = −sU, A = UᵀW);
    * ``norm_preserving="rows"`` (Heretic's "full" row normalization, read from its ``abliterate``):
      N = diag(‖W_i,:‖), Ŵ = N⁻¹W, R = (I − sP) Ŵ, W'_i,: = ‖W_i,:‖ R_i,: / ‖R_i,:‖ — each residual
      coordinate keeps the norm of its incoming weights; W' = diag(c/n) W + (−s)(diag(c) U)(UᵀŴ)
      with c_i = n_i / ‖R_i,:‖. Not low-rank, and no longer orthogonal to U (the residue);
    * ``norm_preserving="columns"``: R = (I − sP) W, W'_:,j = ‖W_:,j‖ R_:,j / ‖R_:,j‖ — each output
      vector keeps its norm; W' = W diag(c) + (−s) U (UᵀW diag(c)). Columns stay orthogonal to U
      at s = 1 (residue 0), as in the plain projection.

    ``b``: the bias, projected b' = (I − sP) b in every variant (a constant write has no norm to keep)."""
    W = W.to(torch.float64).contiguous()
    U = U.to(torch.float64)
    s = float(s)
    row = col = None
    if norm_preserving is None:
        u, a = U, _rows(U, W)
    elif norm_preserving == "rows":
        n = torch.linalg.vector_norm(W, dim=1)
        What = W * _safe_ratio(torch.ones_like(n), n)[:, None]
        A = _rows(U, What)
        R = What + delta_output(U, A, -s)
        c = _safe_ratio(n, torch.linalg.vector_norm(R, dim=1))
        row = _safe_ratio(c, n)
        u, a = (c * U if U.ndim == 1 else c[:, None] * U), A
    elif norm_preserving == "columns":
        m = torch.linalg.vector_norm(W, dim=0)
        A = _rows(U, W)
        R = W + delta_output(U, A, -s)
        col = _safe_ratio(m, torch.linalg.vector_norm(R, dim=0))
        u, a = U, A * col
    else:
        raise ValueError(f"norm_preserving={norm_preserving!r}: expected None or one of {NORM_PRESERVING}")
    out = Ablation(u=u, a=a, gain=-s, row_scale=row, col_scale=col, bias_delta=None, residue=0.0)
    if b is not None:
        b = b.to(torch.float64)
        out.bias_delta = -s * (U * (U @ b) if U.ndim == 1 else U @ (U.T @ b))
    UW = _rows(U, W)
    before = float(torch.linalg.norm(UW))
    out.residue = float(torch.linalg.norm(_rows(U, out.weight(W)))) / before if before > 0 else 0.0
    return out


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
    if vals is None:
        vals = np.linalg.eigvals(A)
    vals = np.concatenate([np.asarray(vals, dtype=np.complex128), np.zeros(zeros, dtype=np.complex128)])
    return vals[np.argsort(-vals.real, kind="stable")][:k]


def top_summary(F: torch.Tensor | None, *, factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """{"lambda1": [re, im], "lambda2": [re, im], "gap": Re λ1 − Re λ2} (λ2 after the pair when
    λ1 is complex, as in docs/math.md §2)."""
    from ..spectra import spectral_summary

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


# ---- the gain within a KL budget (the addition's calibration, the judged strength's ladder) -------------------------------------------------------------------------------------
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
            from ..errors import bad_argument

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
