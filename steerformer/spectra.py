"""Spectra of layer matrices and the three cases of docs/math.md §2 (pure functions on tensors).

Ordering: eigenvalues by real part, descending (ALBERT-large's principal eigenvalue is real and
positive but smaller in modulus than its most negative one, so ordering by modulus would pick
the wrong one). Within a conjugate pair, the one with positive imaginary part comes first.

Zeros are eigenvalues (docs/math.md §1b): a rank-r layer matrix F = A·B (r < d) has d − r of them, and
they take part in the ordering like any other. The factored path lists the zero eigenvalue
min(2, d − r) times — enough for λ1 and λ2 — with null vectors of F as eigenvectors; the
summary counts any |λ| ≤ :data:`RANK_TOL` · radius as 0 (the dense eig returns rounding noise
there). So the dense and factored paths give one λ1, λ2, gap and case for one F.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

import numpy as np
import torch

from .eig import dense_eig, factored_eig, null_vectors, one_blas_thread, run_device, solver_device, top_eig
from .configs import progress_bar
from .errors import bad_argument

#: The one tolerance of the complex test (:func:`lambda_is_complex`): imaginary parts below this
#: fraction of the spectral radius count as real.
REAL_TOL = 1e-10
#: "de facto case 3": relative gap below this **and** |<v1, v2>| above DE_FACTO_OVERLAP.
DE_FACTO_REL_GAP = 0.05
DE_FACTO_OVERLAP = 0.9
#: Eigenvalues with |λ| ≤ RANK_TOL · (spectral radius) are F's numerical null space (docs/math.md §1b):
#: the summary counts them as 0 and the baselines of the statistics leave them out. docs/math.md writes
#: |λ1|; the radius is used because λ1 (the largest real part) can be far below it (ALBERT-large)
#: or be 0 itself — for every layer where λ1 is the radius, the two agree.
RANK_TOL = 1e-8


def lambda_is_complex(z: complex, radius: float) -> bool:
    """The one test of "this eigenvalue is complex": |Im z| > REAL_TOL · radius (the spectral
    radius, or the largest |λ| known). LAPACK and ARPACK return exactly zero imaginary parts for
    real eigenvalues of real matrices, so one relative tolerance serves every solver."""
    return abs(complex(z).imag) > REAL_TOL * max(float(radius), 1e-300)


@dataclasses.dataclass(frozen=True)
class SpectralSummary:
    """λ1, λ2, the complex test, gap and case of one sorted spectrum (docs/math.md §2)."""

    lambda1: complex
    lambda2: complex
    index2: int  # position of λ2 in the sorted values (2 after a complex λ1's pair)
    lambda1_is_complex: bool
    gap: float  # Re λ1 - Re λ2
    relative_gap: float  # gap / |λ1|
    spectral_radius: float  # max |λ| over the values given (all of them for a full spectrum)
    v1v2_overlap: float  # |<v1, v2>|, NaN without vectors
    case: int
    de_facto_case3: bool


def spectral_summary(vals: torch.Tensor | np.ndarray | Sequence[complex], vecs: torch.Tensor | np.ndarray | None = None, *,
                     radius: float | None = None, rel_gap_tol: float = DE_FACTO_REL_GAP,
                     overlap_tol: float = DE_FACTO_OVERLAP) -> SpectralSummary:
    """The single spectral summary: ``vals`` sorted by real part (descending, Im > 0 first within
    a pair), optional unit column vectors ``vecs`` (d, m) in the same order, ``radius`` the
    spectral radius when more is known than ``vals`` (default max |vals|)."""
    v = np.asarray(vals.detach().cpu().numpy() if isinstance(vals, torch.Tensor) else vals, dtype=np.complex128).ravel()
    if v.size == 0:
        raise bad_argument("vals", "an empty spectrum", "at least one eigenvalue")
    rad = float(np.abs(v).max()) if radius is None else float(radius)
    # The null space's rounding noise (dense eig) is the exact zero of the factored path.
    v = np.where(np.abs(v) <= RANK_TOL * rad, 0, v)
    l1 = complex(v[0])
    complex1 = lambda_is_complex(l1, rad)
    j2 = min(2 if complex1 else 1, v.size - 1)  # skip the conjugate partner of a complex λ1
    l2 = complex(v[j2])
    gap = l1.real - l2.real
    rel = gap / max(abs(l1), 1e-300)
    overlap = float("nan")
    if vecs is not None:
        V = vecs.detach().cpu() if isinstance(vecs, torch.Tensor) else torch.as_tensor(np.asarray(vecs))
        overlap = float(torch.abs(torch.vdot(V[:, 0], V[:, j2])))
    strict = gap > REAL_TOL * max(rad, 1e-300)
    case = (2 if complex1 else 1) if strict else 3
    de_facto = bool(case in (1, 2) and rel < rel_gap_tol and overlap > overlap_tol)
    return SpectralSummary(l1, l2, j2, complex1, float(gap), float(rel), rad, overlap, case, de_facto)


class SharedStack:
    """Per-layer eigenvectors stored once per distinct weight slot (ALBERT runs one slot many
    times): ``stack[i]`` is a view of layer i's (d, m) matrix, never a copy; any other indexing
    materializes the full (L, d, m) tensor."""

    def __init__(self, distinct: torch.Tensor, index: Sequence[int]) -> None:
        self.distinct = distinct
        self.index = list(index)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self.index), *self.distinct.shape[1:]))

    @property
    def dtype(self) -> torch.dtype:
        return self.distinct.dtype

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self.distinct[self.index[int(key)]]
        return self.materialize()[key]

    def materialize(self) -> torch.Tensor:
        return self.distinct[torch.as_tensor(self.index, dtype=torch.long)]

    def numpy(self) -> np.ndarray:
        return self.materialize().numpy()


@dataclasses.dataclass
class Spectra:
    """Eigen-decomposition of each layer matrix, plus the per-layer summary of docs/math.md §2.

    ``eigenvectors[k][:, l]`` is the unit right eigenvector of ``eigenvalues[k, l]``, with its
    largest-modulus entry made real and positive (a deterministic sign/phase).
    ``lambda2`` is the next eigenvalue after λ1 — after the whole pair when λ1 is complex.
    ``method[k]`` says how layer k was solved: "full", "factored r=…" (the nonzero spectrum and
    F's zero eigenvalue min(2, d − r) times, m = r + 2 columns when r ≤ d − 2), "top-K" (the K
    eigenvalues of largest real part), or "top-K→full (why)".
    With shared slots (ALBERT) ``eigenvectors`` is a :class:`SharedStack` holding each distinct
    decomposition once.
    """

    eigenvalues: torch.Tensor  # (L, m) complex; m = d (full), r (factored) or K (top-k)
    eigenvectors: torch.Tensor | SharedStack  # (L, d, m) complex, columns
    spectral_radius: torch.Tensor  # (L,)
    lambda1: torch.Tensor  # (L,) complex
    lambda2: torch.Tensor  # (L,) complex
    gap: torch.Tensor  # (L,) Re λ1 - Re λ2
    relative_gap: torch.Tensor  # (L,) gap / |λ1|
    v1v2_overlap: torch.Tensor  # (L,) |<v1, v2>|
    case: list[int]  # 1, 2 or 3
    de_facto_case3: list[bool]
    index2: list[int]  # column of λ2 in eigenvalues
    method: list[str] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return int(self.eigenvalues.shape[0])

    @property
    def lambda1_is_complex(self) -> list[bool]:
        return [lambda_is_complex(complex(l), float(r)) for l, r in zip(self.lambda1, self.spectral_radius)]

    def v1(self) -> torch.Tensor:
        """(L, d) principal eigenvectors (complex)."""
        return torch.stack([self.eigenvectors[k][:, 0] for k in range(len(self))])

    def record(self, k: int) -> dict:
        """JSON-ready summary of layer ``k`` (position in this batch)."""
        c = lambda z: [float(z.real), float(z.imag)]  # noqa: E731
        out = {
            "lambda1": c(self.lambda1[k]), "lambda2": c(self.lambda2[k]),
            "gap": float(self.gap[k]), "relative_gap": float(self.relative_gap[k]),
            "case": int(self.case[k]), "de_facto_case3": bool(self.de_facto_case3[k]),
            "v1v2_overlap": float(self.v1v2_overlap[k]), "spectral_radius": float(self.spectral_radius[k]),
            "top_eigenvalues": [c(z) for z in self.eigenvalues[k, :5]],
        }
        if self.method and self.method[k] != "full":
            out["eig_method"] = self.method[k]
        return out


def _sort_phase(vals: torch.Tensor, vecs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort by real part (descending; Im > 0 first in a pair), unit columns, largest entry real > 0."""
    # Conjugate partners have identical real parts: break the tie towards Im > 0, in float64 so
    # the nudge survives for float32 spectra too.
    v64 = vals.to(torch.complex128)
    key = v64.real + 1e-12 * torch.sign(v64.imag) * v64.abs().amax(-1, keepdim=True)
    order = torch.argsort(key, dim=-1, descending=True)
    if vals.ndim == 1:  # Arnoldi's pair members may differ in Re by rounding: Im > 0 first anyway
        order = _pairs_first_positive(v64[order].cpu().numpy(), order.cpu()).to(order.device)
    vals = torch.gather(vals, -1, order)
    vecs = torch.gather(vecs, -1, order.unsqueeze(-2).expand_as(vecs))
    vecs = vecs / torch.linalg.vector_norm(vecs, dim=-2, keepdim=True)
    # Phase: rotate each column so its largest-modulus entry is real positive.
    idx = vecs.abs().argmax(dim=-2, keepdim=True)
    pivot = torch.gather(vecs, -2, idx)
    vecs = vecs * (pivot.conj() / pivot.abs())
    return vals, vecs


def _pairs_first_positive(v: np.ndarray, order: torch.Tensor) -> torch.Tensor:
    order = order.clone()
    i = 0
    while i + 1 < v.size:
        a, b = v[i], v[i + 1]
        if a.imag < 0 < b.imag and abs(a - np.conj(b)) <= 1e-8 * max(abs(a), 1e-300):
            order[i], order[i + 1] = order[i + 1].clone(), order[i].clone()
            i += 2
        else:
            i += 1
    return order


def sorted_eig(matrix: torch.Tensor | np.ndarray, *, dtype: torch.dtype = torch.float64,
               device: str | torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues sorted by real part (descending) and unit right eigenvectors with fixed phase,
    for one (d, d) or a batch (..., d, d) of real matrices (solver: :mod:`steerformer.eig`)."""
    return _sort_phase(*dense_eig(matrix, dtype=dtype, device=device))


def layer_spectrum(matrix: torch.Tensor | np.ndarray | None = None, *,
                   factors: tuple[torch.Tensor, torch.Tensor] | None = None, top_k: int | None = None,
                   dtype: torch.dtype = torch.float64, device: str | torch.device | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Sorted (values, unit vectors (d, m), method) of one layer matrix F, given as ``matrix`` or as
    ``factors`` (A, B) with F = A·B. Factors with r < d use the r × r problem BA (F is never formed);
    ``top_k`` asks for the K eigenvalues of largest real part by Arnoldi, falling back to the full
    path (recorded in the method string) when Arnoldi fails to converge or a residual is too big.
    The factored path's values are the r nonzero ones plus F's zero eigenvalue min(2, d − r) times
    (module docstring)."""
    A = B = None
    if factors is not None:
        A, B = (torch.as_tensor(t).to(torch.float64) for t in factors)
        if A.shape[1] >= A.shape[0]:  # r ≥ d: nothing to gain, form F
            matrix, A, B = A @ B, None, None
    if matrix is not None:
        matrix = torch.as_tensor(matrix)
    dev = solver_device(matrix.shape[-1] if A is None else A.shape[1], device)
    if dev.type == "cpu":  # the solve and the products around it, wherever the inputs live
        A, B, matrix = (None if t is None else t.cpu() for t in (A, B, matrix))
    method = "full" if A is None else f"factored r={A.shape[1]}"
    if top_k is not None and dev.type == "cpu":
        M = (B @ A) if A is not None else matrix.to(torch.float64)
        got = top_eig(M.numpy(), int(top_k))
        if got.values is not None:
            vals = torch.from_numpy(got.values.copy())
            W = torch.from_numpy(np.ascontiguousarray(got.vectors))
            vecs = W if A is None else A.to(W.dtype) @ W
            if A is not None:
                vals, vecs = with_zero_eigenvalues(vals, vecs, B)
            vals, vecs = _sort_phase(vals.to(_complex(dtype)), vecs.to(_complex(dtype)))
            vals, vecs = vals[:top_k], vecs[:, :top_k]
            return vals, vecs, f"top-{top_k}" + ("" if A is None else f" factored r={A.shape[1]}")
        fallback = f"top-{top_k}→full ({got.reason})"
        method = fallback if A is None else f"{fallback} factored r={A.shape[1]}"
    if A is not None:
        vals, vecs = with_zero_eigenvalues(*factored_eig(A, B, dtype=dtype, device=dev), B)
        vals, vecs = _sort_phase(vals.cpu(), vecs.cpu())
    else:
        vals, vecs = sorted_eig(matrix, dtype=dtype, device=dev)
        vals, vecs = vals.cpu(), vecs.cpu()
    if top_k is not None:
        vals, vecs = vals[:top_k], vecs[:, :top_k]
    return vals, vecs, method


def with_zero_eigenvalues(vals: torch.Tensor, vecs: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The nonzero spectrum of F = A·B (``vals`` (m,), unit ``vecs`` (d, m)) with F's zero
    eigenvalue appended min(2, d − r) times, null vectors of F as its eigenvectors (unsorted), so
    that λ1 or λ2 is 0 when fewer than two nonzero eigenvalues have a positive real part."""
    r, d = B.shape
    z = min(2, d - r)
    if z <= 0:
        return vals, vecs
    N = null_vectors(B, z).to(device=vecs.device, dtype=vecs.real.dtype)
    return (torch.cat([vals, torch.zeros(z, dtype=vals.dtype, device=vals.device)]),
            torch.cat([vecs, N.to(vecs.dtype)], dim=1))


def _complex(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def _layer_task(payload: tuple) -> tuple:
    """Worker-pool entry: one distinct layer, BLAS single-threaded (the pool supplies parallelism)."""
    matrix, factors, top_k, dtype = payload
    torch.set_num_threads(1)
    with one_blas_thread():
        return layer_spectrum(matrix, factors=factors, top_k=top_k, dtype=dtype)


def default_workers() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def spectra(matrices: torch.Tensor | np.ndarray | Sequence, *, dtype: torch.dtype = torch.float64,
            device: str | torch.device | None = None, slot_ids: Sequence[int] | None = None,
            rel_gap_tol: float = DE_FACTO_REL_GAP, overlap_tol: float = DE_FACTO_OVERLAP, progress: bool | str = False,
            top_k: int | None = None, workers: int = 1,
            factors: Sequence[tuple[torch.Tensor, torch.Tensor] | None] | None = None) -> Spectra:
    """Spectra of a stack (L, d, d) of layer matrices, or of one (d, d) matrix (→ L = 1).

    ``slot_ids`` marks layers that share weights (ALBERT): each distinct slot is decomposed once
    and its eigenvectors stored once. ``factors``: per layer (A, B) with F = A·B (a
    :class:`~steerformer.matrices.LayerMatrices` carries them when its layers have r < d); layers
    with r < d get their exact nonzero spectrum from the r × r problem, plus F's zero eigenvalue in
    its place in the ordering (module docstring). ``top_k``: only the K
    eigenvalues of largest real part (Arnoldi, recorded fallback to full). ``workers`` > 1 runs
    the distinct layers in a process pool, each worker's BLAS single-threaded. ``progress``: a
    tqdm bar over the matrices (a string labels it).
    """
    if isinstance(matrices, (str, bytes)) or hasattr(matrices, "__fspath__"):
        raise bad_argument("matrices", str(matrices), "layer matrices (a LayerMatrices, a tensor or an array), "
                           "not a model name", "Use steerformer.analyze(model) for a model id or folder, or "
                           "spectra(layer_matrices(model)).")
    if hasattr(matrices, "matrices"):  # a LayerMatrices
        if slot_ids is None:
            slot_ids = matrices.slot_ids
        if factors is None:
            factors = getattr(matrices, "factors", None)
        matrices = matrices.matrices
    if matrices is None:  # layer_matrices(..., form=False): every layer factored, F never formed
        if not factors or any(f is None for f in factors):
            raise bad_argument("matrices", None, "layer matrices, or factors (A, B) for every layer")
        A, L, d = None, len(factors), factors[0][0].shape[0]
    else:
        A = torch.as_tensor(np.asarray(matrices) if isinstance(matrices, (list, tuple)) else matrices)
        if A.ndim == 2:
            A = A[None]
        if A.ndim != 3 or A.shape[-1] != A.shape[-2]:
            raise bad_argument("matrices", tuple(A.shape), "a square matrix (d, d) or a stack (L, d, d)")
        if not bool(torch.isfinite(A).all()):
            bad = sorted({int(i) for i in torch.nonzero(~torch.isfinite(A))[:, 0]})
            raise bad_argument("matrices", f"non-finite entries in layer(s) {bad}", "finite matrices")
        L, d = A.shape[0], A.shape[-1]
    if dtype not in (torch.float64, torch.float32):
        raise bad_argument("dtype", dtype, "torch.float64 or torch.float32")
    if top_k is not None and not (isinstance(top_k, (int, np.integer)) and 1 <= top_k <= d):
        raise bad_argument("top_k", top_k, f"an integer in [1, d={d}]")
    if not isinstance(workers, (int, np.integer)) or workers < 1:
        raise bad_argument("workers", workers, "an integer ≥ 1")
    device = run_device(device)  # checked once per run (analyze checked it already); the solvers take it as it is
    slots = list(range(L)) if slot_ids is None else list(slot_ids)
    if len(slots) != L:
        raise bad_argument("slot_ids", slot_ids, f"one slot id per matrix ({L})")
    if factors is not None and len(factors) != L:
        raise bad_argument("factors", f"{len(factors)} entries", f"one (A, B) or None per matrix ({L})")
    todo = [(s, slots.index(s)) for s in dict.fromkeys(slots)]  # (slot, its first layer)
    fac = lambda k: None if factors is None else factors[k]  # noqa: E731
    results: dict[int, tuple] = {}
    if workers > 1 and len(todo) > 1 and device.type == "cpu":
        import concurrent.futures as cf
        import multiprocessing as mp

        # spawn: a forked child would inherit the parent's busy BLAS/OpenMP thread pools.
        with cf.ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=mp.get_context("spawn")) as pool:
            futs = {s: pool.submit(_layer_task, (None if fac(k) is not None else A[k], fac(k), top_k, dtype))
                    for s, k in todo}
            for s, _ in progress_bar(progress, "eig per layer", todo, unit="layer", leave=True):
                results[s] = futs[s].result()
    else:
        for s, k in progress_bar(progress, "eig per layer", todo, unit="layer", leave=True):
            results[s] = layer_spectrum(None if fac(k) is not None else A[k], factors=fac(k), top_k=top_k,
                                        dtype=dtype, device=device)
    widths = {r[0].shape[0] for r in results.values()}
    if len(widths) > 1:  # e.g. some layers factored (r columns), some not (d): keep the common top
        m = min(widths)
        results = {s: (v[:m], V[:, :m], meth) for s, (v, V, meth) in results.items()}
    order = [s for s, _ in todo]
    summ = {s: spectral_summary(v, V, rel_gap_tol=rel_gap_tol, overlap_tol=overlap_tol) for s, (v, V, _) in results.items()}
    per = [summ[s] for s in slots]
    distinct = torch.stack([results[s][1] for s in order])
    index = [order.index(s) for s in slots]
    vectors: torch.Tensor | SharedStack = distinct if index == list(range(L)) else SharedStack(distinct, index)
    as_t = lambda xs, dt: torch.tensor(xs, dtype=dt)  # noqa: E731
    cdt = results[order[0]][0].dtype
    return Spectra(
        eigenvalues=torch.stack([results[s][0] for s in slots]), eigenvectors=vectors,
        spectral_radius=as_t([p.spectral_radius for p in per], torch.float64),
        lambda1=torch.tensor([p.lambda1 for p in per], dtype=cdt),
        lambda2=torch.tensor([p.lambda2 for p in per], dtype=cdt), gap=as_t([p.gap for p in per], torch.float64),
        relative_gap=as_t([p.relative_gap for p in per], torch.float64),
        v1v2_overlap=as_t([p.v1v2_overlap for p in per], torch.float64), case=[p.case for p in per],
        de_facto_case3=[p.de_facto_case3 for p in per], index2=[p.index2 for p in per],
        method=[results[s][2] for s in slots],
    )
