"""Principal eigenvector of the cumulative product Φ_k = F_k ⋯ F_1 (Fig. 8, docs/math.md §4).

Only w_k is needed, so each step costs one d×d×d product plus an Arnoldi run (ARPACK) warm-started
from w_{k-1} — never a second full ``eig`` per layer, which alone would cost as much as the spectra.
"Principal" here is the eigenvalue of largest **modulus**: the product is what repeated steps apply,
and the power method on a product amplifies by modulus (real-part order of λ^k oscillates).
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

import numpy as np
import torch

from ..eig import one_blas_thread
from ..errors import bad_argument
from ..spectra import lambda_is_complex
from .eigenbasis import orthonormal_pair

log = logging.getLogger(__name__)

#: below this width ARPACK's k < d - 1 constraint and overhead make a dense eig the better choice.
DENSE_BELOW = 64


def _power_iteration(M: np.ndarray, v0: np.ndarray, iters: int = 30, tol: float = 1e-10):
    """A few warm-started power steps; accepted only when the residual ‖Mw − λw‖ is tiny (a
    dominant real eigenvalue that the previous w already nearly spans — e.g. F^k of a shared layer)."""
    w = v0 / np.linalg.norm(v0)
    scale = np.linalg.norm(M)
    for _ in range(iters):
        y = M @ w
        lam = float(w @ y)
        if np.linalg.norm(y - lam * w) <= tol * scale:
            return complex(lam), w.astype(complex)
        ny = np.linalg.norm(y)
        if ny == 0:
            return None
        w = y / ny
    return None


def principal_eigvec(M: np.ndarray, v0: np.ndarray | None = None) -> tuple[complex, np.ndarray]:
    """(λ, unit v) with the largest |λ| of a real square matrix: warm power iteration when it
    converges at once, else Arnoldi (ARPACK), dense ``eig`` for small d."""
    d = M.shape[0]
    if v0 is not None:
        got = _power_iteration(M, v0)
        if got is not None:
            return got
    if d < DENSE_BELOW:
        vals, vecs = np.linalg.eig(M)
        j = int(np.argmax(np.abs(vals)))
        return complex(vals[j]), vecs[:, j] / np.linalg.norm(vecs[:, j])
    from scipy.sparse.linalg import ArpackNoConvergence, eigs

    # A few Ritz values and a wide Krylov space: random-like layer products have many eigenvalues
    # of nearly equal modulus, where a narrow space (k=1, default ncv) needs thousands of restarts
    # and a tight tol may even settle on the wrong one. tol 1e-8 keeps correlations exact to ~1e-8.
    k, ncv = min(6, d - 2), min(64, d - 1)
    try:
        with one_blas_thread():
            vals, vecs = eigs(M, k=k, ncv=ncv, which="LM", v0=v0, tol=1e-8, maxiter=20 * d)
    except ArpackNoConvergence as exc:  # keep what converged; fall back to dense if nothing did
        if exc.eigenvalues.size:
            vals, vecs = exc.eigenvalues, exc.eigenvectors
        else:
            log.warning("ARPACK did not converge on the cumulative product; using a dense eig")
            vals, vecs = np.linalg.eig(M)
    j = int(np.argmax(np.abs(vals)))
    return complex(vals[j]), vecs[:, j] / np.linalg.norm(vecs[:, j])


def cumulative_principal(matrices: Sequence[torch.Tensor]) -> Iterator[tuple[complex, torch.Tensor, bool]]:
    """For k = 1, 2, …: (λ(Φ_k) of the rescaled product, orthonormal basis (d, 1|2) of w_k's real
    direction or of span{Re w_k, Im w_k} when λ is complex, whether it is complex).

    Φ_k is rescaled to unit Frobenius norm each step: the product of many layers otherwise
    overflows or underflows while its eigenvectors do not change.
    """
    phi: np.ndarray | None = None
    v0 = None
    for step, F in enumerate(matrices, 1):
        Fn = F.detach().cpu().double().numpy()
        phi = Fn.copy() if phi is None else Fn @ phi
        norm = float(np.linalg.norm(phi))
        if not norm > 0:  # an all-zero product (all-zero weights) has no principal direction; 0/0 is NaN
            raise bad_argument("cumulative", True, f"layer matrices whose product is not all zero (the product "
                               f"of the first {step} layer matrices is {'all zero' if norm == 0 else norm}: a "
                               "model with all-zero weights has no principal direction)",
                               "Check the checkpoint's weights, or skip the statistic with --no-cumulative "
                               "(cumulative=False).")
        phi /= norm
        lam, w = principal_eigvec(phi, v0)
        v0 = np.real(w) + np.imag(w)  # a real start vector inside the previous principal subspace
        is_complex = lambda_is_complex(lam, abs(lam))  # λ is the largest-modulus one: |λ| is the radius
        # Arnoldi eigenvectors carry an arbitrary complex phase: make the largest entry real.
        piv = w[int(np.argmax(np.abs(w)))]
        w = w * (np.conj(piv) / abs(piv))
        wt = torch.from_numpy(np.ascontiguousarray(w))
        if is_complex:
            basis = orthonormal_pair(wt.real.double(), wt.imag.double())
        else:
            u = wt.real.double()
            basis = (u / torch.linalg.vector_norm(u))[:, None]
        yield lam, basis, is_complex
