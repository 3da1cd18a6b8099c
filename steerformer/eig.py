"""The eigen-solvers behind every spectrum steerformer computes, chosen in one place.

Three exact paths (docs/math.md §1b, §2; issue 14):

- :func:`dense_eig` — the full general eigenproblem of a real (d, d) matrix. On CPU the LAPACK
  ``geev`` wrapper is the one :data:`CPU_BACKEND` names (picked by ``benchmarks/bench_eig.py``);
  on CUDA it is ``torch.linalg.eig``.
- :func:`factored_eig` — F = A·B with A (d, r), B (r, d), r < d: the nonzero eigenvalues of AB are
  those of BA (r, r), and BA w = λw gives F (Aw) = λ (Aw). Never forms the (d, d) F. F also has
  d − r zero eigenvalues (docs/math.md §1b): :func:`null_vectors` gives eigenvectors for them, so the
  zeros take part in the ordering like any other eigenvalue.
- :func:`top_eig` — the k eigenvalues of largest real part by implicitly restarted Arnoldi
  (ARPACK, ``which="LR"``), accepted only when every residual ‖Mv − λv‖ ≤ tol·‖M‖; otherwise the
  caller's full path runs and the reason is recorded.

Results are unsorted (values, unit-norm column vectors) as NumPy/torch complex arrays;
:func:`steerformer.spectra.sorted_eig` applies the ordering and phase convention.

:func:`rightmost_eig` gives only the eigenvalue of largest real part and its vector, for a batch of
matrices (the null model of docs/math.md §4c needs one per random layer and draw): one batched LAPACK
call below :data:`ARNOLDI_FROM`, ARPACK per matrix above it (measured: d = 384, one thread,
0.07–0.09 s against 0.28–0.31 s for the full eig; d = 192, 0.045–0.055 s against 0.06–0.08 s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import numpy as np
import torch

from .configs import check_device
from .errors import bad_argument

log = logging.getLogger(__name__)

#: Dense CPU solver per dtype, by measurement (benchmarks/bench_eig.py --big, 2-core machine, load
#: 1.4–3, best of 3 alternated rounds): float64 d=1024 numpy 0.99 s / scipy 0.96 / torch 0.94,
#: d=2048 4.51 / 3.98 / 4.09; float32 d=1024 1.01 / 0.58 / 0.52, d=2048 4.59 / 2.35 / 2.03. All
#: three call LAPACK geev (differences: the BLAS each links, the copies around the call); SciPy is
#: fastest or within 15 % everywhere and has the steadiest medians, so it serves both dtypes.
CPU_BACKEND: dict[torch.dtype, str] = {torch.float64: "scipy", torch.float32: "scipy"}

#: Default top-k policy for spectra-only runs: full spectrum up to this width, top-k above.
FULL_UP_TO = 2048
DEFAULT_TOP_K = 16
#: Residual tolerance (relative to the operator's Frobenius-norm estimate) for accepting Ritz pairs.
TOP_K_RESIDUAL = 1e-10
#: :func:`rightmost_eig` uses ARPACK per matrix from this size up (CPU), one batched eig below.
ARNOLDI_FROM = 256


def one_blas_thread():
    """The BLAS of numpy and scipy on one thread inside the ``with`` (through threadpoolctl; without
    it the results are the same, only slower on busy machines): a pool's worker, whose parallelism is
    the pool's, and ARPACK's hundreds of memory-bound d×d matvecs, which several BLAS threads fight
    over with torch's spinning OpenMP workers (measured 1 thread: 0.4 ms, 2 threads on busy cores: 2–18 ms)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional
        return contextlib.nullcontext()
    return threadpool_limits(1)


#: Smallest eigenproblem (n × n) solved on a CUDA device when one is asked for: below it the CPU is
#: faster (LAPACK geev has no GPU kernel; torch's CUDA eig is MAGMA's hybrid geev, whose transfers
#: and start-up dominate small problems). Measured on an H200 against its host's 16 cores
#: (issue 18): dense d = 2048 GPU 5.6× faster, d = 4096 9.6×; the r = 1024 problems of a
#: Llama-3-70B shape (80 layers) GPU 37 s, CPU 9 s. ``benchmarks/gpu_eig.py`` re-measures it.
CUDA_EIG_FROM = 2048


def solver_device(n: int, device: str | torch.device | None) -> torch.device:
    """Where an n × n eigenproblem runs when ``device`` is asked for: CUDA only from
    :data:`CUDA_EIG_FROM` on (the CPU is faster below), else the CPU."""
    dev = run_device(device)
    return dev if dev.type == "cuda" and n >= CUDA_EIG_FROM else torch.device("cpu")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The checked torch device the solvers run on (cpu for None): :func:`configs.check_device`
    (a CUDA request without CUDA, a typo or a missing GPU index is one clear error naming
    ``device``) limited to cpu and cuda."""
    return check_device(device, kinds=("cpu", "cuda"))


def run_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a solver uses it. A ``torch.device`` is what :func:`resolve_device` gave the
    caller, which checked it once per run (``analyze``, ``spectra``); a name or ``None`` (a direct
    call) is checked here. So a run checks its device once, not once per layer and solver."""
    return device if isinstance(device, torch.device) else resolve_device(device)


def _scipy_eig(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import scipy.linalg

    return scipy.linalg.eig(A, overwrite_a=True, check_finite=False)


def dense_eig(matrix: torch.Tensor | np.ndarray, *, dtype: torch.dtype = torch.float64,
              device: str | torch.device | None = None,
              backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(eigenvalues (…, d), unit right eigenvectors (…, d, d) as columns), complex, unsorted.

    Batches (…, d, d) are accepted (CPU NumPy/SciPy paths loop over the batch). ``backend``
    overrides :data:`CPU_BACKEND` ("numpy", "scipy" or "torch"); CUDA always uses torch.
    """
    if dtype not in (torch.float64, torch.float32):
        raise bad_argument("dtype", dtype, "torch.float64 or torch.float32")
    dev = run_device(device)
    name = "torch" if dev.type == "cuda" else backend or CPU_BACKEND[dtype]
    if name == "torch":
        return torch.linalg.eig(torch.as_tensor(matrix).to(dtype=dtype, device=dev))
    if name not in ("numpy", "scipy"):
        raise bad_argument("backend", backend, "'numpy', 'scipy' or 'torch'")
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    A = (matrix.detach().cpu().numpy() if isinstance(matrix, torch.Tensor) else np.asarray(matrix))
    # A private writable copy in the solver's dtype (scipy overwrites it in place).
    A = np.array(A, dtype=np_dtype, order="F" if name == "scipy" else "C", copy=True)
    solve = _scipy_eig if name == "scipy" else np.linalg.eig
    if A.ndim == 2:
        w, v = solve(A)
    else:
        flat = A.reshape(-1, *A.shape[-2:])
        pairs = [solve(np.array(m, order="F", copy=True)) for m in flat]
        w = np.stack([p[0] for p in pairs]).reshape(A.shape[:-1])
        v = np.stack([p[1] for p in pairs]).reshape(A.shape)
    # NumPy and SciPy return real arrays when every eigenvalue is real: always complex here.
    cdt = np.complex128 if dtype == torch.float64 else np.complex64
    return (torch.from_numpy(np.ascontiguousarray(w, dtype=cdt)),
            torch.from_numpy(np.ascontiguousarray(v, dtype=cdt)))


def factored_eig(A: torch.Tensor, B: torch.Tensor, *, dtype: torch.dtype = torch.float64,
                 device: str | torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Nonzero spectrum of F = A·B (A (d, r), B (r, d)) from the r × r matrix BA.

    Returns r eigenvalues and unit eigenvectors v = Aw/‖Aw‖ (d, r) of F, unsorted. Eigenvalues of
    BA that are zero (B A singular) come out as ~0 with an arbitrary vector, like any null
    direction of F.
    """
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0] or A.shape[0] != B.shape[1]:
        raise bad_argument("factors", (tuple(A.shape), tuple(B.shape)), "A (d, r) and B (r, d)")
    A64 = A.to(torch.float64)
    small = B.to(torch.float64) @ A64  # (r, r): the product is in float64 whatever the eig dtype
    vals, W = dense_eig(small, dtype=dtype, device=device)
    A_ = A64.to(device=W.device, dtype=W.real.dtype)
    V = torch.complex(A_ @ W.real, A_ @ W.imag)  # two real GEMMs, not one complex (4× the flops)
    V = V / torch.linalg.vector_norm(V, dim=0, keepdim=True).clamp_min(1e-300)
    return vals, V


def null_vectors(B: torch.Tensor, count: int, *, seed: int = 0) -> torch.Tensor:
    """``count`` orthonormal vectors (d, count) with B x = 0, for B (r, d) with r + count ≤ d: unit
    eigenvectors of the zero eigenvalue of F = A·B, on B's device. Seeded Gaussian vectors with B's
    row space projected out twice (any basis of the null space is as good: the dense eig returns an
    arbitrary one too)."""
    r, d = B.shape
    if count < 0 or r + count > d:
        raise bad_argument("count", count, f"an integer in [0, d − r = {d - r}]")
    B64 = B.detach().to(torch.float64)
    Q, _ = torch.linalg.qr(B64.T)  # (d, r): orthonormal basis of B's row space
    g = torch.Generator().manual_seed(int(seed))
    X = torch.randn((d, count), generator=g, dtype=torch.float64).to(B64.device)
    for _ in range(2):  # twice: one projection leaves O(eps·cond) of the row space
        X = X - Q @ (Q.T @ X)
    return torch.linalg.qr(X)[0]


@dataclasses.dataclass
class TopK:
    """Outcome of :func:`top_eig`: the pairs when accepted, else ``None`` and why."""

    values: np.ndarray | None
    vectors: np.ndarray | None
    reason: str  # "ok", or why the caller must fall back to the full path
    max_residual: float


def top_eig(M: np.ndarray, k: int, *, tol: float = TOP_K_RESIDUAL, ncv: int | None = None,
            maxiter: int | None = None, seed: int = 0) -> TopK:
    """The ``k`` eigenvalues of largest real part of a real (n, n) matrix and their unit vectors,
    by ARPACK (``which="LR"``); accepted only if every returned pair has ‖Mv − λv‖ ≤ tol·‖M‖_F
    (ARPACK's own test is relative to |λ|; this one is what the fallback decides on). A conjugate
    pair cut at the k-th position is completed (so up to k + 1 pairs come back; callers sort and
    keep k). The start vector is deterministic."""
    import scipy.sparse.linalg as sla

    n = M.shape[0]
    if k < 1 or k > n - 2:
        return TopK(None, None, f"k={k} needs 1 ≤ k ≤ n − 2 = {n - 2}", float("nan"))
    ncv = ncv or min(n - 1, max(2 * k + 1, 64))
    v0 = np.random.default_rng(seed).standard_normal(n)
    try:
        vals, vecs = sla.eigs(M, k=k, which="LR", v0=v0, ncv=ncv, tol=tol, maxiter=maxiter or 50 * n)
    except sla.ArpackNoConvergence as exc:
        return TopK(None, None, f"ARPACK did not converge ({exc.eigenvalues.size} of {k} pairs)", float("nan"))
    except sla.ArpackError as exc:  # pragma: no cover - numerical breakdown
        return TopK(None, None, f"ARPACK error: {exc}", float("nan"))
    scale = float(np.linalg.norm(M))
    vecs = vecs / np.linalg.norm(vecs, axis=0, keepdims=True)
    res = np.linalg.norm(M @ vecs - vecs * vals, axis=0)
    worst = float(res.max() / max(scale, 1e-300))
    if worst > tol:
        return TopK(None, None, f"residual {worst:.1e} > {tol:.0e}", worst)
    # A real matrix's pairs come in conjugates (λ̄, v̄): complete a pair ARPACK cut at the k-th place.
    lone = [j for j in range(vals.size) if vals[j].imag != 0
            and not np.any(np.abs(vals - np.conj(vals[j])) <= 1e-8 * abs(vals[j]))]
    if lone:
        vals = np.concatenate([vals, np.conj(vals[lone])])
        vecs = np.concatenate([vecs, np.conj(vecs[:, lone])], axis=1)
    order = np.argsort(-vals.real, kind="stable")
    return TopK(vals[order], vecs[:, order], "ok", worst)


def rightmost_eig(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a batch (K, m, m) of real matrices: the eigenvalue of largest real part (K,) complex (of a
    conjugate pair, the member with Im > 0), its unit eigenvector (K, m) complex and the largest
    |λ| among the eigenvalues computed (K,) — the scale of the complex test — on M's device.

    Batched ``torch.linalg.eig`` on CUDA and for m < :data:`ARNOLDI_FROM`; otherwise ARPACK
    (``which="LR"``) per matrix with the accepted-residual test of :func:`top_eig`, falling back to
    the full eig of that matrix."""
    if M.ndim != 3 or M.shape[-1] != M.shape[-2]:
        raise bad_argument("M", tuple(M.shape), "a batch of square matrices (K, m, m)")
    m = M.shape[-1]
    if M.device.type == "cuda" or m < ARNOLDI_FROM:
        return _pick_rightmost(*torch.linalg.eig(M.to(torch.float64)))
    out = []
    for A in M.detach().to("cpu", torch.float64).numpy():
        got = top_eig(A, min(6, m - 2))
        if got.values is None:
            vals, vecs = torch.linalg.eig(torch.from_numpy(A))
        else:
            vals, vecs = torch.from_numpy(got.values), torch.from_numpy(np.ascontiguousarray(got.vectors))
        out.append(_pick_rightmost(vals[None], vecs[None]))
    lam, vec, rad = (torch.cat(t).to(M.device) for t in zip(*out))
    return lam, vec, rad


def _pick_rightmost(vals: torch.Tensor, vecs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rad = vals.abs().amax(-1)
    # Conjugate partners tie in Re: the nudge puts Im > 0 first (as spectra's ordering does).
    key = vals.real + 1e-12 * torch.sign(vals.imag) * rad[:, None]
    j = key.argmax(-1)
    lam = vals.gather(-1, j[:, None])[:, 0]
    vec = vecs.gather(-1, j[:, None, None].expand(-1, vecs.shape[-2], 1))[..., 0]
    return lam, vec / torch.linalg.vector_norm(vec, dim=-1, keepdim=True), rad
