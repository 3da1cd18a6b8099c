"""Local stability at equilibria of the maps (docs/math.md §8; power-method paper Appendix D).

* Numeric: :func:`map_jacobian` (autograd or central finite differences) and
  :func:`tangent_jacobian`, its restriction to the tangent space of (S^{d−1})^n, whose spectrum
  is what decides stability (the papers' "intrinsic" Jacobian).
* Analytic: :func:`consensus_eigenvalues` (Oja map (9), and maps (8)/(3) at consensus) and
  :func:`bipartite_eigenvalues` (map (8)), with :func:`bipartite_stability` applying Theorem 3
  and the Schur–Cohen test :func:`schur_cohen_stable`.
* Finders: :func:`consensus_point`, :func:`bipartite_point` build the candidates from V's
  eigenvectors; :func:`find_equilibria` keeps those the map really fixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..errors import bad_argument
from .geometry import as_tensor, check_square_stack, threads_for

Map = Callable[[torch.Tensor], torch.Tensor]


# -- numeric Jacobians ----------------------------------------------------------------------
def map_jacobian(step: Map, x: object, *, method: str = "autograd", eps: float = 1e-6) -> torch.Tensor:
    """Extrinsic Jacobian ∂vec(step(x))/∂vec(x), shape (n·d, n·d), x of shape (n, d)."""
    xt = as_tensor(x, "x")
    if xt.ndim != 2:
        raise bad_argument("x", f"shape {tuple(xt.shape)}", "one state of shape (n, d)")
    n, d = xt.shape

    def flat(z: torch.Tensor) -> torch.Tensor:
        return step(z.reshape(n, d)).reshape(-1)

    if method == "autograd":
        with threads_for(xt.numel()):
            return torch.autograd.functional.jacobian(flat, xt.reshape(-1))
    if method == "fd":
        z = xt.reshape(-1)
        cols = []
        with torch.no_grad(), threads_for(xt.numel()):
            for k in range(z.numel()):
                e = torch.zeros_like(z)
                e[k] = eps
                cols.append((flat(z + e) - flat(z - e)) / (2 * eps))
        return torch.stack(cols, dim=1)
    raise bad_argument("method", method, "'autograd' or 'fd'")


def tangent_basis(x: object) -> torch.Tensor:
    """Orthonormal basis (n·d, n·(d−1)) of T_x(S^{d−1})^n = ⊕_i {δ : x_iᵀδ = 0}."""
    xt = as_tensor(x, "x")
    n, d = xt.shape
    B = torch.zeros(n * d, n * (d - 1), dtype=xt.dtype, device=xt.device)
    for i in range(n):
        u = (xt[i] / xt[i].norm()).reshape(d, 1)
        # complete u to an orthonormal basis; the last d−1 columns span u^⊥
        Q, _ = torch.linalg.qr(torch.cat([u, torch.eye(d, dtype=xt.dtype, device=xt.device)], dim=1))
        B[i * d:(i + 1) * d, i * (d - 1):(i + 1) * (d - 1)] = Q[:, 1:d]
    return B


def tangent_jacobian(step: Map, x: object, *, method: str = "autograd", eps: float = 1e-6) -> torch.Tensor:
    """Bᵀ J B: the Jacobian restricted to the tangent space (at an equilibrium, step(x) = x).

    The normalization makes J map into the tangent space at step(x); at a fixed point that is
    the tangent space at x, so Bᵀ J B carries every eigenvalue that decides stability and
    drops the n "extrinsic" (radial) ones.
    """
    xt = as_tensor(x, "x")
    J = map_jacobian(step, xt, method=method, eps=eps)
    B_in = tangent_basis(xt)
    with torch.no_grad():
        B_out = tangent_basis(step(xt))
    return B_out.T @ J @ B_in


def tangent_eigenvalues(step: Map, x: object, **kwargs) -> np.ndarray:
    """Eigenvalues of :func:`tangent_jacobian`, sorted by modulus (descending)."""
    ev = np.linalg.eigvals(tangent_jacobian(step, x, **kwargs).cpu().numpy())
    return ev[np.argsort(-np.abs(ev), kind="stable")]


# -- equilibria -----------------------------------------------------------------------------
def _symmetric_eig(V: object) -> tuple[np.ndarray, np.ndarray]:
    Vt = check_square_stack(V, "V")
    if Vt.shape[0] != 1:
        raise bad_argument("V", f"{Vt.shape[0]} matrices", "one (d, d) value matrix")
    Vn = Vt[0].cpu().numpy()
    if np.abs(Vn - Vn.T).max() > 1e-12 * max(1.0, np.abs(Vn).max()):
        raise bad_argument("V", "a non-symmetric matrix", "a symmetric V (Assumption 1 of Appendix D)",
                           "For a general layer matrix use consensus points of its real eigenvectors.")
    lam, vec = np.linalg.eigh(Vn)
    order = np.argsort(-lam)  # λ_1 ≥ λ_2 ≥ … (λ_1 the principal eigenvalue)
    return lam[order], vec[:, order]


def _check_index(m: int, d: int) -> int:
    if int(m) != m or not 0 <= m < d:
        raise bad_argument("m", m, f"an eigenvector index 0 ≤ m < d={d} (0 = principal)")
    return int(m)


def consensus_point(V: object, m: int, n: int) -> torch.Tensor:
    """All n tokens at v_m (eigenvalues sorted descending, m = 0 is v_1)."""
    lam, vec = _symmetric_eig(V)
    m = _check_index(m, len(lam))
    return torch.tensor(np.tile(vec[:, m], (int(n), 1)), device=as_tensor(V, "V").device)


def bipartite_point(V: object, m: int, n1: int, n2: int) -> torch.Tensor:
    """n1 tokens at v_m followed by n2 tokens at −v_m."""
    lam, vec = _symmetric_eig(V)
    m = _check_index(m, len(lam))
    if n1 < 1 or n2 < 1:
        raise bad_argument("n1/n2", (n1, n2), "both groups non-empty")
    v = vec[:, m]
    return torch.tensor(np.vstack([np.tile(v, (int(n1), 1)), np.tile(-v, (int(n2), 1))]), device=as_tensor(V, "V").device)


@dataclass
class Equilibrium:
    kind: str  # "consensus" or "bipartite"
    m: int
    n1: int
    n2: int
    x: torch.Tensor
    residual: float
    eigenvalues: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def stable(self) -> bool:
        return bool(self.eigenvalues.size) and bool(np.abs(self.eigenvalues).max() < 1)


def find_equilibria(step: Map, V: object, n: int, *, tol: float = 1e-10, with_eigenvalues: bool = False) -> list[Equilibrium]:
    """Consensus and bipartite candidates at V's eigenvectors that ``step`` really fixes.

    (Up to the global sign symmetry: x and −x are both equilibria; only x is listed.)
    """
    lam, _ = _symmetric_eig(V)
    found = []
    for m in range(len(lam)):
        cands = [("consensus", n, 0, consensus_point(V, m, n))]
        cands += [("bipartite", n1, n - n1, bipartite_point(V, m, n1, n - n1)) for n1 in range(n - 1, n // 2 - 1, -1)
                  if n - n1 >= 1]
        for kind, n1, n2, x in cands:
            with torch.no_grad():
                r = float((step(x) - x).abs().max())
            if r < tol:
                eq = Equilibrium(kind, m, n1, n2, x, r)
                if with_eigenvalues:
                    eq.eigenvalues = tangent_eigenvalues(step, x)
                found.append(eq)
    return found


# -- analytic spectra (docs/math.md §8) ------------------------------------------------------------
def consensus_eigenvalues(V: object, m: int, n: int, tau: float) -> np.ndarray:
    """Intrinsic eigenvalues at the consensus x_i = v_m of map (9) (and of (8), (3) there):
    (1 + τλ_l)/|1 + τλ_m| for l ≠ m, and 1/|1 + τλ_m| with multiplicity (n−1)(d−1)."""
    lam, _ = _symmetric_eig(V)
    m = _check_index(m, len(lam))
    c = abs(1 + tau * lam[m])
    others = [(1 + tau * lam[l]) / c for l in range(len(lam)) if l != m]
    ev = np.array(others + [1 / c] * ((int(n) - 1) * (len(lam) - 1)))
    return ev[np.argsort(-np.abs(ev), kind="stable")]


@dataclass
class BipartiteSpectrum:
    """Analytic quantities of Appendix D at a bipartite point of map (8)."""

    sigma: float
    gamma: tuple[float, float]
    c: tuple[float, float]
    M: dict[int, np.ndarray]  # l → the 2×2 block M_l
    eigenvalues: np.ndarray


def bipartite_spectrum(V: object, QK: object, m: int, n1: int, n2: int, tau: float) -> BipartiteSpectrum:
    """σ = v_mᵀQᵀKv_m, Z_s, α_s, β_s, γ_s, c_s = 1 + τλ_mγ_s and the M_l blocks (docs/math.md §8)."""
    lam, vec = _symmetric_eig(V)
    d = len(lam)
    m = _check_index(m, d)
    P = check_square_stack(QK, "QK", d)[0].cpu().numpy()
    v = vec[:, m]
    s = float(v @ P @ v)
    ep, em = np.exp(s), np.exp(-s)
    Z1, Z2 = n1 * ep + n2 * em, n1 * em + n2 * ep
    a1, b1, b2, a2 = ep / Z1, em / Z1, em / Z2, ep / Z2
    g1, g2 = (n1 * ep - n2 * em) / Z1, (n2 * ep - n1 * em) / Z2
    c1, c2 = 1 + tau * lam[m] * g1, 1 + tau * lam[m] * g2
    blocks, ev = {}, [1 / c1] * ((n1 - 1) * (d - 1)) + [1 / c2] * ((n2 - 1) * (d - 1))
    for l in range(d):
        if l == m:
            continue
        blocks[l] = np.array([[(1 + tau * lam[l] * n1 * a1) / c1, tau * lam[l] * n2 * b1 / c1],
                              [tau * lam[l] * n1 * b2 / c2, (1 + tau * lam[l] * n2 * a2) / c2]])
        ev += list(np.linalg.eigvals(blocks[l]))
    ev = np.array(ev, dtype=complex)
    ev = ev.real if np.abs(ev.imag).max(initial=0) == 0 else ev
    return BipartiteSpectrum(s, (g1, g2), (c1, c2), blocks, ev[np.argsort(-np.abs(ev), kind="stable")])


def bipartite_eigenvalues(V: object, QK: object, m: int, n1: int, n2: int, tau: float) -> np.ndarray:
    """The n(d−1) intrinsic eigenvalues at the bipartite point (n1 at v_m, n2 at −v_m) of map (8)."""
    return bipartite_spectrum(V, QK, m, n1, n2, tau).eigenvalues


def schur_cohen_stable(M: object) -> bool:
    """Both roots of a real 2×2 matrix inside the unit disc: |det M| < 1 and |tr M| < 1 + det M."""
    A = np.asarray(M, dtype=float)
    if A.shape != (2, 2):
        raise bad_argument("M", f"shape {A.shape}", "a 2×2 matrix")
    det, tr = float(np.linalg.det(A)), float(np.trace(A))
    return abs(det) < 1 and abs(tr) < 1 + det


@dataclass
class StabilityReport:
    stable: bool
    conditions: dict[str, bool]
    spectrum: BipartiteSpectrum


def bipartite_stability(V: object, QK: object, m: int, n1: int, n2: int, tau: float) -> StabilityReport:
    """Theorem 3 (Appendix D): the bipartite point is locally asymptotically stable when
    τ < 1/‖V‖, λ_mγ_1 > 0, λ_mγ_2 > 0, and every M_l (l ≠ m) passes Schur–Cohen."""
    lam, _ = _symmetric_eig(V)
    sp = bipartite_spectrum(V, QK, m, n1, n2, tau)
    norm_V = float(np.abs(lam).max())
    conds = {"tau < 1/||V||": tau < 1 / norm_V, "lambda_m*gamma_1 > 0": lam[m] * sp.gamma[0] > 0,
             "lambda_m*gamma_2 > 0": lam[m] * sp.gamma[1] > 0,
             **{f"Schur-Cohen M_{l}": schur_cohen_stable(M) for l, M in sp.M.items()}}
    return StabilityReport(all(conds.values()), conds, sp)
