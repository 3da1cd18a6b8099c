"""Eigen-directions of a layer matrix as one real basis, so that correlations of many tokens with
all eigenvectors cost one GEMM (docs/math.md §4).

Every eigenvector becomes a *group* of orthonormal real columns:
- a real eigenvalue: one column, the unit real eigenvector v (1-D correlation |<x, v>|);
- a complex-conjugate pair: two columns, an orthonormal basis of span{Re v, Im v}; the pair counts
  once, through ρ_S(x) = ‖Π_S x‖ / ‖x‖ (eq. (6) of the paper).
Columns of different groups are *not* orthogonal (F is not normal); only within a group.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ..spectra import RANK_TOL, REAL_TOL


@dataclasses.dataclass
class Directions:
    """Real basis ``basis`` (d, m) and its grouping.

    ``first[g]``/``second[g]`` are the basis columns of group g; ``is_pair[g]`` says whether the
    second column counts (1-D groups repeat their column and ignore it). Group 0 holds v1.
    """

    basis: torch.Tensor  # (d, m) float64, m = d
    first: torch.Tensor  # (G,) long
    second: torch.Tensor  # (G,) long
    is_pair: torch.Tensor  # (G,) bool
    eig_index: torch.Tensor  # (G,) column of the eigenvalue in the sorted spectrum (first of a pair)
    #: (G,) whether the group's |λ| > RANK_TOL · spectral radius (docs/math.md §1b): the baselines
    #: average over these only; the others are rounding noise in F's null space.
    in_rank: torch.Tensor | None = None
    numerical_rank: int | None = None  # eigenvalues (a pair counts 2) with |λ| > RANK_TOL · radius

    @property
    def n_groups(self) -> int:
        return int(self.first.shape[0])

    def group_correlations(self, coeffs: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
        """ρ_g for every token and group from the coefficients ``x @ basis`` (N, m) → (N, G)."""
        a = coeffs[:, self.first] ** 2
        b = coeffs[:, self.second] ** 2 * self.is_pair.to(coeffs)  # coeffs' dtype and device
        return torch.sqrt(a + b) / norms[:, None]


def orthonormal_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis (d, 2) of span{a, b} (Gram–Schmidt twice, for the nearly parallel pairs
    of ALBERT-base-like "de facto case 3" layers). First column = a / ‖a‖."""
    q1 = a / torch.linalg.vector_norm(a)
    r = b - (q1 @ b) * q1
    r = r - (q1 @ r) * q1
    nr = torch.linalg.vector_norm(r)
    if float(nr) <= 1e-14 * float(torch.linalg.vector_norm(b)):
        # b ∥ a: the subspace is 1-D; a zero second column keeps ρ_S = ρ(x, a) exact.
        return torch.stack([q1, torch.zeros_like(q1)], dim=1)
    return torch.stack([q1, r / nr], dim=1)


def _pairs(vals: np.ndarray, tol: float) -> list[tuple[int, int | None]]:
    """Groups of the sorted spectrum: (j, None) for real, (j, partner) for conjugate pairs."""
    d = vals.shape[0]
    used = np.zeros(d, dtype=bool)
    out: list[tuple[int, int | None]] = []
    for j in range(d):
        if used[j]:
            continue
        used[j] = True
        if abs(vals[j].imag) <= tol:
            out.append((j, None))
            continue
        target = np.conj(vals[j])
        # spectra() puts the partner right after; search only when ties in Re λ broke the order.
        if j + 1 < d and not used[j + 1] and abs(vals[j + 1] - target) <= 1e-8 * max(abs(target), 1.0):
            p = j + 1
        else:
            cand = np.flatnonzero(~used)
            p = int(cand[np.argmin(np.abs(vals[cand] - target))]) if cand.size else None
        if p is not None:
            used[p] = True
        out.append((j, p))
    return out


def eigen_directions(eigenvalues: torch.Tensor, eigenvectors: torch.Tensor) -> Directions:
    """Build the grouped real basis from a sorted spectrum (as returned by ``spectra``).

    Vectorized over the groups (a per-column loop cost ~50 ms per layer at d = 1024, as much as
    the projection GEMM it prepares): real eigenvectors are normalized all at once, and every
    conjugate pair gets the same double Gram–Schmidt as :func:`orthonormal_pair`, column-wise.
    """
    vals = eigenvalues.detach().cpu().numpy()
    V = eigenvectors.detach().to("cpu")
    tol = REAL_TOL * max(float(np.abs(vals).max()), 1e-300)
    groups = _pairs(vals, tol)
    j = torch.tensor([g[0] for g in groups], dtype=torch.long)
    is_pair = torch.tensor([g[1] is not None for g in groups], dtype=torch.bool)
    width = torch.where(is_pair, 2, 1)
    first = torch.cumsum(width, 0) - width
    second = torch.where(is_pair, first + 1, first)
    # Phase fixed by spectra(): the vector of a real eigenvalue is real up to rounding, and a pair's
    # subspace is span{Re v, Im v} of its first member.
    a = V[:, j].real.to(torch.float64)
    b = V[:, j].imag.to(torch.float64)
    q1 = a / torch.linalg.vector_norm(a, dim=0)
    r = b - (q1 * b).sum(0) * q1
    r = r - (q1 * r).sum(0) * q1
    nr = torch.linalg.vector_norm(r, dim=0)
    # b ∥ a: the subspace is 1-D; a zero second column keeps ρ_S = ρ(x, a) exact.
    q2 = torch.where(nr > 1e-14 * torch.linalg.vector_norm(b, dim=0), r / nr.clamp_min(1e-300), 0.0)
    m = int(width.sum())
    basis = torch.empty((V.shape[0], m), dtype=torch.float64)
    basis[:, first] = q1
    basis[:, first[is_pair] + 1] = q2[:, is_pair]
    absval = np.abs(vals)
    cut = RANK_TOL * max(float(absval.max()), 1e-300)
    in_rank = torch.as_tensor(absval[j.numpy()] > cut, dtype=torch.bool)
    return Directions(basis=basis, first=first, second=second, is_pair=is_pair, eig_index=j,
                      in_rank=in_rank, numerical_rank=int((absval > cut).sum()))


def orthonormal_columns(cols: list[torch.Tensor]) -> torch.Tensor:
    """Orthonormal basis (d, k) of span{cols} (Gram–Schmidt twice, first column = cols[0]
    normalized); columns that add nothing (‖residual‖ ≤ 1e-14 ‖col‖) are dropped."""
    out: list[torch.Tensor] = []
    for c in cols:
        r = c
        for _ in range(2):
            for q in out:
                r = r - (q @ r) * q
        nr = torch.linalg.vector_norm(r)
        if float(nr) > 1e-14 * float(torch.linalg.vector_norm(c)):
            out.append(r / nr)
    return torch.stack(out, dim=1)


def chance_rho_S(dim: int, d: int) -> float:
    """E[‖Π_S x‖ / ‖x‖] for x uniform on the sphere of R^d and S of dimension ``dim``:
    ρ_S² ~ Beta(dim/2, (d − dim)/2), so E ρ_S = Γ((dim+1)/2) Γ(d/2) / (Γ(dim/2) Γ((d+1)/2))."""
    if dim >= d:
        return 1.0
    lg = math.lgamma
    return math.exp(lg((dim + 1) / 2) + lg(d / 2) - lg(dim / 2) - lg((d + 1) / 2))


def principal_subspace(eigenvalues: torch.Tensor, eigenvectors: torch.Tensor, index2: int) -> tuple[torch.Tensor, str]:
    """Orthonormal basis (d, s) of the subspace S of docs/math.md §4 and its kind.

    λ1 complex (case 2): S = span{Re v1, Im v1} ("pair", s = 2). λ1 real and λ2 real:
    S = span{v1, v2} ("v1v2", s = 2), the case-3 / de-facto-case-3 subspace. λ1 real and λ2 one of
    a complex pair: S = span{v1, Re v2, Im v2} ("v1pair", s = 3) — span{v1, Re v2} alone would
    depend on the arbitrary phase of the complex eigenvector v2; the 3-D subspace does not, and has
    its own chance level (:func:`chance_rho_S`, recorded as ``rho_S_chance``).
    """
    vals = eigenvalues.detach().cpu()
    V = eigenvectors.detach().cpu()
    tol = REAL_TOL * max(float(vals.abs().max()), 1e-300)
    v1 = V[:, 0]
    if abs(float(vals[0].imag)) > tol:
        return orthonormal_pair(v1.real.double(), v1.imag.double()), "pair"
    v2 = V[:, index2]
    if abs(float(vals[index2].imag)) > tol:
        return orthonormal_columns([v1.real.double(), v2.real.double(), v2.imag.double()]), "v1pair"
    return orthonormal_pair(v1.real.double(), v2.real.double()), "v1v2"
