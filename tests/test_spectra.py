"""Spectra against numpy/scipy, and the case classifier on constructed matrices."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from steerformer import spectra
from steerformer.errors import InvalidArgumentError


def _with_eigs(eigs_real: list[float], pairs: list[tuple[float, float]] = (), seed: int = 0, vecs=None) -> np.ndarray:
    """Real matrix with prescribed eigenvalues: S · blockdiag(reals, 2x2 rotations) · S⁻¹."""
    rng = np.random.default_rng(seed)
    blocks = [np.array([[a, -b], [b, a]]) for a, b in pairs] + [np.array([[r]]) for r in eigs_real]
    D = scipy.linalg.block_diag(*blocks)
    S = rng.standard_normal(D.shape) if vecs is None else vecs
    return S @ D @ np.linalg.inv(S)


def test_eigenvalues_and_vectors_match_scipy() -> None:
    rng = np.random.default_rng(1)
    A = rng.standard_normal((3, 20, 20))
    sp = spectra(A)
    for k in range(3):
        ref = scipy.linalg.eigvals(A[k])
        assert np.allclose(np.sort_complex(sp.eigenvalues[k].numpy()), np.sort_complex(ref), atol=1e-10)
        ev = sp.eigenvalues[k].numpy()
        assert np.all(np.diff(ev.real) <= 1e-12)  # ordered by real part, descending
        V = sp.eigenvectors[k].numpy()
        assert np.allclose(A[k] @ V, V * ev, atol=1e-9)  # right eigenvectors
        assert np.allclose(np.linalg.norm(V, axis=0), 1.0)
        piv = V[np.abs(V).argmax(axis=0), np.arange(V.shape[1])]
        assert np.allclose(piv.imag, 0, atol=1e-12) and np.all(piv.real > 0)  # fixed phase
        assert sp.spectral_radius[k].item() == pytest.approx(np.abs(ref).max(), rel=1e-12)


def test_phase_is_deterministic_under_rescaling() -> None:
    A = np.random.default_rng(2).standard_normal((10, 10))
    v1 = spectra(A).eigenvectors[0].numpy()
    v2 = spectra(A * 3.0).eigenvectors[0].numpy()
    assert np.allclose(v1, v2, atol=1e-9)


def test_case1_real_dominant() -> None:
    sp = spectra(_with_eigs([3.0, 1.0, 0.5, -4.0]))
    assert sp.case == [1]
    assert complex(sp.lambda1[0]) == pytest.approx(3.0)
    assert complex(sp.lambda2[0]) == pytest.approx(1.0)
    assert sp.gap[0].item() == pytest.approx(2.0)
    assert sp.relative_gap[0].item() == pytest.approx(2.0 / 3.0)
    # ordering is by real part: the larger-modulus -4 comes last, not first
    assert sp.spectral_radius[0].item() == pytest.approx(4.0)


def test_case2_complex_pair_gap_skips_partner() -> None:
    sp = spectra(_with_eigs([1.0, 0.2], pairs=[(2.0, 0.5)]))
    assert sp.case == [2]
    assert complex(sp.lambda1[0]) == pytest.approx(2.0 + 0.5j)
    assert complex(sp.lambda2[0]) == pytest.approx(1.0)  # after the conjugate partner
    assert sp.gap[0].item() == pytest.approx(1.0)
    assert sp.lambda1_is_complex == [True]


def test_case3_repeated_real_part() -> None:
    sp = spectra(_with_eigs([2.0, 2.0, 0.5]))
    assert sp.case == [3]


def test_de_facto_case3_small_gap_parallel_vectors() -> None:
    S = np.eye(5)
    S[:, 1] = S[:, 0] + 1e-2 * S[:, 1]  # v2 nearly parallel to v1
    sp = spectra(_with_eigs([1.00, 0.99, 0.3, 0.2, 0.1], vecs=S))
    assert sp.case == [1] and sp.de_facto_case3 == [True]
    assert sp.v1v2_overlap[0].item() > 0.99
    far = spectra(_with_eigs([1.00, 0.99, 0.3, 0.2, 0.1], vecs=np.eye(5)))
    assert far.de_facto_case3 == [False] and far.v1v2_overlap[0].item() < 1e-12


def test_shared_slots_decomposed_once(monkeypatch) -> None:
    import sys

    mod = sys.modules["steerformer.spectra"]  # the package re-exports a function of the same name

    calls = []
    orig = mod.sorted_eig
    monkeypatch.setattr(mod, "sorted_eig", lambda A, **kw: (calls.append(1), orig(A, **kw))[1])
    A = np.random.default_rng(3).standard_normal((2, 6, 6))
    sp = mod.spectra(np.stack([A[0], A[1], A[0], A[1]]), slot_ids=[0, 1, 0, 1])
    assert len(calls) == 2
    assert torch.equal(sp.eigenvalues[0], sp.eigenvalues[2])


def test_float32_option_close_to_float64() -> None:
    A = np.random.default_rng(4).standard_normal((30, 30))
    a = spectra(A).eigenvalues[0]
    b = spectra(A, dtype=torch.float32).eigenvalues[0]
    assert b.dtype == torch.complex64
    assert torch.allclose(a.to(torch.complex64), b, atol=1e-4)


def test_bad_input() -> None:
    with pytest.raises(InvalidArgumentError, match="square"):
        spectra(np.zeros((3, 4)))
    bad = np.eye(3)[None].repeat(2, 0)
    bad[1, 0, 0] = np.nan
    with pytest.raises(InvalidArgumentError, match=r"layer\(s\) \[1\]"):
        spectra(bad)
