"""One spectrum for one F (docs/math.md §1b, §2): the factored path (the r × r problem BA) and the dense
eig of F give the same λ1, λ2, gap and case, the d − r zero eigenvalues of a rank-r F included."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from steerformer.adapters.base import AttentionWeights, MaskSpec
from steerformer.spectra import layer_spectrum, spectral_summary, spectra


def _low_rank(beta: float, d: int = 40, r: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) with F = A·B = Bᵀ(−I + β e₁e₁ᵀ)B, rank r < d: every nonzero eigenvalue is negative at
    β = 0; at β = 50 exactly one is positive."""
    g = torch.Generator().manual_seed(seed)
    B = torch.randn((r, d), generator=g, dtype=torch.float64) / d ** 0.5
    D = -torch.eye(r, dtype=torch.float64)
    D[0, 0] += beta
    return B.T @ D, B


def _both(A: torch.Tensor, B: torch.Tensor):
    dense = spectral_summary(*layer_spectrum(A @ B)[:2])
    factored = spectral_summary(*layer_spectrum(factors=(A, B))[:2])
    return dense, factored


def _reference(F: np.ndarray) -> tuple[float, float]:
    """Re λ1, Re λ2 straight from LAPACK (λ2 after the pair when λ1 is complex), rounding noise of
    the null space counted as 0."""
    vals = scipy.linalg.eigvals(F)
    rad = np.abs(vals).max()
    vals = np.where(np.abs(vals) <= 1e-8 * rad, 0, vals)
    vals = vals[np.lexsort((-vals.imag, -vals.real))]
    j2 = 2 if abs(vals[0].imag) > 1e-10 * rad else 1
    return float(vals[0].real), float(vals[j2].real)


@pytest.mark.parametrize("beta, case", [(0.0, 3), (50.0, 1)])
def test_dense_and_factored_paths_agree_on_a_rank_deficient_F(beta, case) -> None:
    A, B = _low_rank(beta)
    dense, factored = _both(A, B)
    l1, l2 = _reference((A @ B).numpy())
    for s in (dense, factored):
        assert s.lambda1.real == pytest.approx(l1, abs=1e-12) and s.lambda2.real == pytest.approx(l2, abs=1e-12)
        assert s.case == case and not s.lambda1_is_complex
    assert l2 == 0.0  # the zeros take part: λ2 = 0 at β = 50, λ1 = λ2 = 0 at β = 0
    assert (l1 == 0.0) == (beta == 0.0)
    assert factored.gap == pytest.approx(dense.gap, abs=1e-12)
    assert factored.relative_gap == pytest.approx(dense.relative_gap, abs=1e-12)
    assert factored.index2 == dense.index2


def test_factored_zero_eigenvectors_are_null_vectors_of_F() -> None:
    A, B = _low_rank(0.0)
    vals, vecs, _ = layer_spectrum(factors=(A, B))
    F = (A @ B).to(vecs.dtype)
    zero = vals.abs() == 0
    assert int(zero.sum()) == 2 and vals.shape == (12 + 2,)
    assert float(torch.linalg.vector_norm(F @ vecs[:, zero], dim=0).max()) <= 1e-12
    assert torch.allclose(torch.linalg.vector_norm(vecs, dim=0), torch.ones(vecs.shape[1], dtype=torch.float64))


def _gqa(seed: int, negative: bool = False, d: int = 48, H: int = 6, H_kv: int = 2, d_h: int = 4) -> AttentionWeights:
    g = torch.Generator().manual_seed(seed)
    W_V = torch.randn((H_kv, d_h, d), generator=g, dtype=torch.float64)
    W_O = torch.randn((H, d, d_h), generator=g, dtype=torch.float64)
    if negative:  # W_O[h] = −W_V[g(h)]ᵀ: F = −Σ_h V_gᵀV_g is negative semidefinite, λ1 = λ2 = 0
        W_O = -W_V[torch.arange(H) * H_kv // H].transpose(-1, -2).clone()
    return AttentionWeights(W_V=W_V, b_V=None, W_O=W_O, b_O=None, scale=d_h ** -0.5, mask=MaskSpec("causal"))


@pytest.mark.parametrize("seed, negative", [(0, False), (1, False), (2, False), (3, True)])
def test_dense_and_factored_spectra_agree_on_grouped_query_layers(seed, negative) -> None:
    w = _gqa(seed, negative)
    A, B = w.layer_factors()
    F = w.layer_matrix()
    dense = spectra(F[None])
    factored = spectra(F[None], factors=[(A, B)])
    assert factored.method == ["factored r=8"] and dense.method == ["full"]
    l1, l2 = _reference(F.numpy())
    scale = float(dense.spectral_radius[0])
    for sp in (dense, factored):
        assert complex(sp.lambda1[0]).real == pytest.approx(l1, abs=1e-10 * scale)
        assert complex(sp.lambda2[0]).real == pytest.approx(l2, abs=1e-10 * scale)
    assert factored.case == dense.case
    assert float(factored.gap[0]) == pytest.approx(float(dense.gap[0]), abs=1e-10 * scale)
    if negative:
        assert l1 == 0.0 and l2 == 0.0 and dense.case == [3]
