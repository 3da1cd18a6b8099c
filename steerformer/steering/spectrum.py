"""The top of a layer matrix's spectrum without a full eigendecomposition.

Steering needs |λ1(F_L)| (to turn a strength into a gain) and reports λ1' and the gap after the
edit. ARPACK's implicitly restarted Arnoldi ('LR': largest real part — MATH.md §2 orders by real
part) gets them from a few dozen matrix-vector products; small matrices, or an Arnoldi run that
does not converge, fall back to the full ``eig``.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse.linalg
import torch

log = logging.getLogger(__name__)


def top_eigenvalues(F: torch.Tensor | None, k: int = 4, *,
                    factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> np.ndarray:
    """The ``k`` eigenvalues of largest real part, sorted by real part (descending), complex128.

    ``factors`` (A, B) with F = A·B (``AttentionWeights.layer_factors()``): when r < d the nonzero
    eigenvalues come from the r × r matrix BA (MATH.md §1b); ``F`` may be None (then F = A·B when r ≥ d)."""
    if factors is not None and factors[0].shape[1] < factors[0].shape[0]:
        A = (factors[1].detach().to(torch.float64) @ factors[0].detach().to(torch.float64)).cpu().numpy()
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
        except scipy.sparse.linalg.ArpackNoConvergence:
            log.info("ARPACK did not converge on a %dx%d matrix: full eig instead", d, d)
    if vals is None:
        vals = np.linalg.eigvals(A)
    vals = np.asarray(vals, dtype=np.complex128)
    return vals[np.argsort(-vals.real, kind="stable")][:k]


def top_summary(F: torch.Tensor | None, *, factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """{"lambda1": [re, im], "lambda2": [re, im], "gap": Re λ1 − Re λ2} (λ2 after the pair when
    λ1 is complex, as in MATH.md §2)."""
    from ..spectra import spectral_summary

    s = spectral_summary(top_eigenvalues(F, 4, factors=factors))
    l1, l2 = s.lambda1, s.lambda2
    return {"lambda1": [float(l1.real), float(l1.imag)], "lambda2": [float(l2.real), float(l2.imag)],
            "gap": s.gap, "abs_lambda1": float(abs(l1))}
