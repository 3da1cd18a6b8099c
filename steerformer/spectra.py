"""Spectra of layer matrices and the three cases of MATH.md §2 (pure functions on tensors).

Ordering: eigenvalues by real part, descending (ALBERT-large's principal eigenvalue is real and
positive but smaller in modulus than its most negative one, so ordering by modulus would pick
the wrong one). Within a conjugate pair, the one with positive imaginary part comes first.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from .errors import bad_argument

#: Imaginary parts below this fraction of the spectral radius count as real.
REAL_TOL = 1e-10
#: "de facto case 3": relative gap below this **and** |<v1, v2>| above DE_FACTO_OVERLAP.
DE_FACTO_REL_GAP = 0.05
DE_FACTO_OVERLAP = 0.9


@dataclasses.dataclass
class Spectra:
    """Eigen-decomposition of each layer matrix, plus the per-layer summary of MATH.md §2.

    ``eigenvectors[k][:, l]`` is the unit right eigenvector of ``eigenvalues[k, l]``, with its
    largest-modulus entry made real and positive (a deterministic sign/phase).
    ``lambda2`` is the next eigenvalue after λ1 — after the whole pair when λ1 is complex.
    """

    eigenvalues: torch.Tensor  # (L, d) complex
    eigenvectors: torch.Tensor  # (L, d, d) complex, columns
    spectral_radius: torch.Tensor  # (L,)
    lambda1: torch.Tensor  # (L,) complex
    lambda2: torch.Tensor  # (L,) complex
    gap: torch.Tensor  # (L,) Re λ1 - Re λ2
    relative_gap: torch.Tensor  # (L,) gap / |λ1|
    v1v2_overlap: torch.Tensor  # (L,) |<v1, v2>|
    case: list[int]  # 1, 2 or 3
    de_facto_case3: list[bool]
    index2: list[int]  # column of λ2 in eigenvalues

    def __len__(self) -> int:
        return int(self.eigenvalues.shape[0])

    @property
    def lambda1_is_complex(self) -> list[bool]:
        return [abs(float(l.imag)) > REAL_TOL * float(r) for l, r in zip(self.lambda1, self.spectral_radius)]

    def v1(self) -> torch.Tensor:
        """(L, d) principal eigenvectors (complex)."""
        return self.eigenvectors[:, :, 0]

    def record(self, k: int) -> dict:
        """JSON-ready summary of layer ``k`` (position in this batch)."""
        c = lambda z: [float(z.real), float(z.imag)]  # noqa: E731
        return {
            "lambda1": c(self.lambda1[k]), "lambda2": c(self.lambda2[k]),
            "gap": float(self.gap[k]), "relative_gap": float(self.relative_gap[k]),
            "case": int(self.case[k]), "de_facto_case3": bool(self.de_facto_case3[k]),
            "v1v2_overlap": float(self.v1v2_overlap[k]), "spectral_radius": float(self.spectral_radius[k]),
            "top_eigenvalues": [c(z) for z in self.eigenvalues[k, :5]],
        }


def sorted_eig(matrix: torch.Tensor | np.ndarray, *, dtype: torch.dtype = torch.float64,
               device: str | torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues sorted by real part (descending) and unit right eigenvectors with fixed phase,
    for one (d, d) or a batch (..., d, d) of real matrices."""
    if dtype not in (torch.float64, torch.float32):
        raise bad_argument("dtype", dtype, "torch.float64 or torch.float32")
    A = torch.as_tensor(matrix).to(dtype=dtype, device=device)
    vals, vecs = torch.linalg.eig(A)  # LAPACK geev on CPU: columns already have unit 2-norm
    # Conjugate partners have identical real parts: break the tie towards Im > 0, in float64 so
    # the nudge survives for float32 spectra too.
    v64 = vals.to(torch.complex128)
    key = v64.real + 1e-12 * torch.sign(v64.imag) * v64.abs().amax(-1, keepdim=True)
    order = torch.argsort(key, dim=-1, descending=True)
    vals = torch.gather(vals, -1, order)
    vecs = torch.gather(vecs, -1, order.unsqueeze(-2).expand_as(vecs))
    vecs = vecs / torch.linalg.vector_norm(vecs, dim=-2, keepdim=True)
    # Phase: rotate each column so its largest-modulus entry is real positive.
    idx = vecs.abs().argmax(dim=-2, keepdim=True)
    pivot = torch.gather(vecs, -2, idx)
    vecs = vecs * (pivot.conj() / pivot.abs())
    return vals, vecs


def _summarize(vals: torch.Tensor, vecs: torch.Tensor, *, rel_gap_tol: float, overlap_tol: float):
    radius = float(vals.abs().max())
    l1 = vals[0]
    complex1 = abs(float(l1.imag)) > REAL_TOL * max(radius, 1e-300)
    j2 = 2 if complex1 else 1  # skip the conjugate partner of a complex λ1
    j2 = min(j2, vals.shape[0] - 1)
    l2 = vals[j2]
    gap = float(l1.real - l2.real)
    rel = gap / max(float(l1.abs()), 1e-300)
    overlap = float(torch.abs(torch.vdot(vecs[:, 0], vecs[:, j2])))
    strict = gap > REAL_TOL * max(radius, 1e-300)
    case = (2 if complex1 else 1) if strict else 3
    de_facto = case in (1, 2) and rel < rel_gap_tol and overlap > overlap_tol
    return radius, l1, l2, gap, rel, overlap, case, de_facto, j2


def spectra(
    matrices: torch.Tensor | np.ndarray | Sequence,
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device | None = None,
    slot_ids: Sequence[int] | None = None,
    rel_gap_tol: float = DE_FACTO_REL_GAP,
    overlap_tol: float = DE_FACTO_OVERLAP,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> Spectra:
    """Spectra of a stack (L, d, d) of layer matrices, or of one (d, d) matrix (→ L = 1).

    ``slot_ids`` marks layers that share weights (ALBERT): each distinct slot is decomposed once.
    ``progress`` wraps the per-matrix loop (e.g. ``tqdm``); the loop runs one LAPACK call per
    distinct matrix so progress is meaningful and memory stays at one workspace.
    """
    if isinstance(matrices, (str, bytes)) or hasattr(matrices, "__fspath__"):
        raise bad_argument("matrices", str(matrices), "layer matrices (a LayerMatrices, a tensor or an array), "
                           "not a model name", "Use steerformer.analyze(model) for a model id or folder, or "
                           "spectra(layer_matrices(model)).")
    if hasattr(matrices, "matrices") and slot_ids is None:  # a LayerMatrices
        slot_ids = matrices.slot_ids
        matrices = matrices.matrices
    A = torch.as_tensor(np.asarray(matrices) if isinstance(matrices, (list, tuple)) else matrices)
    if A.ndim == 2:
        A = A[None]
    if A.ndim != 3 or A.shape[-1] != A.shape[-2]:
        raise bad_argument("matrices", tuple(A.shape), "a square matrix (d, d) or a stack (L, d, d)")
    if not bool(torch.isfinite(A).all()):
        bad = sorted({int(i) for i in torch.nonzero(~torch.isfinite(A))[:, 0]})
        raise bad_argument("matrices", f"non-finite entries in layer(s) {bad}", "finite matrices")
    L = A.shape[0]
    slots = list(range(L)) if slot_ids is None else list(slot_ids)
    if len(slots) != L:
        raise bad_argument("slot_ids", slot_ids, f"one slot id per matrix ({L})")
    first: dict[int, int] = {}
    for k, s in enumerate(slots):
        first.setdefault(s, k)
    todo = list(first.items())
    results: dict[int, tuple] = {}
    it = progress(todo) if progress is not None else todo
    for s, k in it:
        vals, vecs = sorted_eig(A[k], dtype=dtype, device=device)
        results[s] = (vals.cpu(), vecs.cpu(), _summarize(vals.cpu(), vecs.cpu(), rel_gap_tol=rel_gap_tol, overlap_tol=overlap_tol))
    per = [results[s] for s in slots]
    as_t = lambda xs, dt: torch.tensor(xs, dtype=dt)  # noqa: E731
    return Spectra(
        eigenvalues=torch.stack([p[0] for p in per]),
        eigenvectors=torch.stack([p[1] for p in per]),
        spectral_radius=as_t([p[2][0] for p in per], torch.float64),
        lambda1=torch.stack([p[2][1] for p in per]),
        lambda2=torch.stack([p[2][2] for p in per]),
        gap=as_t([p[2][3] for p in per], torch.float64),
        relative_gap=as_t([p[2][4] for p in per], torch.float64),
        v1v2_overlap=as_t([p[2][5] for p in per], torch.float64),
        case=[p[2][6] for p in per],
        de_facto_case3=[p[2][7] for p in per],
        index2=[p[2][8] for p in per],
    )
