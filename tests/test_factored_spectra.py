"""Factored spectra, top-k Arnoldi with fallback, the worker pool, one spectral summary,
shared-slot storage — each checked against an independent dense computation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from steerformer.adapters.base import AttentionWeights, MaskSpec
from steerformer.errors import InvalidArgumentError
from steerformer.spectra import layer_spectrum, spectral_summary, spectra


def _planted(d: int, top: list[float], *, parallel: float | None = None, seed: int = 0) -> np.ndarray:
    """S · diag(top, bulk) · S⁻¹ with a random bulk of radius ≈ 1; ``parallel``: the second
    eigenvector is the first plus this much noise (a near-degenerate, nearly parallel top like
    ALBERT-base's)."""
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((d, d))
    if parallel is not None:
        S[:, 1] = S[:, 0] + parallel * rng.standard_normal(d)
    bulk = rng.uniform(-0.9, 0.9, d - len(top))
    return S @ np.diag(np.concatenate([top, bulk])) @ np.linalg.inv(S)


def _sorted_ref(M: np.ndarray) -> np.ndarray:
    vals = scipy.linalg.eigvals(M)
    return vals[np.lexsort((-vals.imag, -vals.real))]


# ---- factored spectra (docs/math.md §1b) ----------------------------------------------------------

def test_factored_spectrum_equals_full_eig_on_planted_factors() -> None:
    rng = np.random.default_rng(0)
    d, r = 80, 24
    A, B = rng.standard_normal((d, r)), rng.standard_normal((r, d))
    F = A @ B
    vals, vecs, method = layer_spectrum(factors=(torch.from_numpy(A), torch.from_numpy(B)))
    # r nonzero eigenvalues and F's zero eigenvalue twice (docs/math.md §1b: the zeros are ordered too)
    assert method == f"factored r={r}" and vals.shape == (r + 2,) and vecs.shape == (d, r + 2)
    assert int((vals == 0).sum()) == 2
    vals, vecs = vals[vals != 0], vecs[:, vals != 0]
    full = scipy.linalg.eigvals(F)
    nonzero = full[np.argsort(-np.abs(full))][:r]  # the rest are rounding noise around 0
    nonzero = nonzero[np.lexsort((-nonzero.imag, -nonzero.real))]
    lam1 = abs(nonzero).max()
    assert np.abs(vals.numpy() - nonzero).max() <= 1e-10 * lam1
    V = vecs.numpy()
    assert np.allclose(np.linalg.norm(V, axis=0), 1.0)
    assert np.linalg.norm(F @ V - V * vals.numpy(), axis=0).max() <= 1e-10 * lam1


def _gqa_weights(d=48, H=6, H_kv=2, d_h=4, seed=0) -> AttentionWeights:
    g = torch.Generator().manual_seed(seed)
    return AttentionWeights(
        W_V=torch.randn((H_kv, d_h, d), generator=g, dtype=torch.float64), b_V=None,
        W_O=torch.randn((H, d, d_h), generator=g, dtype=torch.float64), b_O=None,
        scale=d_h ** -0.5, mask=MaskSpec("causal"))


def test_layer_factors_of_grouped_query_weights_and_their_spectrum() -> None:
    H, H_kv = 6, 2
    w = _gqa_weights(H=H, H_kv=H_kv)
    A, B = w.layer_factors()
    assert A.shape == (48, 8) and B.shape == (8, 48)
    # Independent: F = Σ_h W_O[h] W_V[g(h)], query head h reading KV head h·H_kv // H (repeat_kv).
    F = sum(w.W_O[h] @ w.W_V[h * H_kv // H] for h in range(H))
    assert torch.allclose(A @ B, F, atol=1e-12)
    sp = spectra(F[None], factors=[(A, B)])
    assert sp.method == ["factored r=8"] and sp.eigenvalues.shape == (1, 8 + 2)  # + the zero, twice
    ref = _sorted_ref(F.numpy())
    ref = np.r_[ref[np.abs(ref) > 1e-8 * np.abs(ref).max()], 0, 0]  # 40 noise zeros: 2 kept, exact
    ref = ref[np.lexsort((-ref.imag, -ref.real))]
    assert np.allclose(sp.eigenvalues[0].numpy(), ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_layer_factors_equal_output_and_value_matrices_without_grouping() -> None:
    w = _gqa_weights(H=4, H_kv=4, d_h=12)
    A, B = w.layer_factors()
    assert torch.equal(A, w.output_matrix()) and torch.equal(B, w.value_matrix())
    assert torch.allclose(A @ B, w.layer_matrix(), atol=1e-12)


# ---- top-k ------------------------------------------------------------------------------------

@pytest.mark.parametrize("parallel", [None, 1e-2])
def test_top_k_equals_full_eig_including_a_near_degenerate_top(parallel) -> None:
    # Top 5 + 0.999·5 (near-degenerate; with parallel=1e-2 also nearly parallel, like ALBERT-base).
    M = _planted(300, [5.0, 4.995, 3.0, 2.5, 2.0, 1.8], parallel=parallel, seed=1)
    vals, vecs, method = layer_spectrum(torch.from_numpy(M), top_k=6)
    ref = _sorted_ref(M)[:6]
    assert vals.shape == (6,) and method == "top-6"  # Arnoldi itself, not the fallback
    assert np.abs(vals.numpy() - ref).max() <= 1e-8 * abs(ref[0]), method
    res = np.linalg.norm(M @ vecs.numpy() - vecs.numpy() * vals.numpy(), axis=0)
    assert res.max() <= 1e-8 * np.linalg.norm(M)


def test_top_k_falls_back_to_full_and_records_why(monkeypatch) -> None:
    import sys

    from steerformer.eig import TopK

    mod = sys.modules["steerformer.spectra"]  # the package re-exports a function of the same name

    monkeypatch.setattr(mod, "top_eig", lambda M, k: TopK(None, None, "ARPACK did not converge (0 of 5 pairs)", float("nan")))
    M = _planted(60, [3.0, 2.0], seed=2)
    sp = spectra(M, top_k=4)
    assert sp.method == ["top-4→full (ARPACK did not converge (0 of 5 pairs))"]
    assert np.allclose(sp.eigenvalues[0].numpy(), _sorted_ref(M)[:4], atol=1e-10)
    assert sp.record(0)["eig_method"].startswith("top-4→full")


def test_top_k_of_factored_layer() -> None:
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((120, 40)), rng.standard_normal((40, 120))
    vals, vecs, method = layer_spectrum(factors=(torch.from_numpy(A), torch.from_numpy(B)), top_k=5)
    assert method.startswith("top-5") and "factored r=40" in method
    ref = _sorted_ref(A @ B)[:5]
    assert np.abs(vals.numpy() - ref).max() <= 1e-8 * np.abs(ref).max()
    F = A @ B
    assert np.linalg.norm(F @ vecs.numpy() - vecs.numpy() * vals.numpy(), axis=0).max() <= 1e-8 * np.abs(ref).max()


# ---- one summary --------------------------------------------------------------------------------

def test_spectral_summary_complex_pair_and_tolerance() -> None:
    vals = np.array([2 + 1j, 2 - 1j, 1.5, 0.1])
    s = spectral_summary(vals)
    assert s.lambda1_is_complex and s.index2 == 2 and s.lambda2 == 1.5 and s.gap == pytest.approx(0.5) and s.case == 2
    # An imaginary part below REAL_TOL · radius is real: 1e-12 relative.
    s = spectral_summary(np.array([3 + 3e-12j, 1.0]))
    assert not s.lambda1_is_complex and s.index2 == 1 and s.case == 1


def test_steering_and_bridge_use_the_same_lambda1_as_spectra() -> None:
    from steerformer.ode.bridge import principal_eigenvector
    from steerformer.steering.methods.paper.algebra import top_summary

    M = _planted(90, [4.0, 3.0], seed=4)
    sp = spectra(M)
    lam, v = principal_eigenvector(torch.from_numpy(M))
    top = top_summary(torch.from_numpy(M))
    assert abs(lam - complex(sp.lambda1[0])) < 1e-10 and abs(top["lambda1"][0] - 4.0) < 1e-8
    assert abs(top["gap"] - float(sp.gap[0])) < 1e-8
    assert np.linalg.norm(M @ v - 4.0 * v) < 1e-8
    w = _gqa_weights(seed=5)
    A, B = w.layer_factors()
    assert abs(top_summary(None, factors=(A, B))["lambda1"][0] - _sorted_ref((A @ B).numpy())[0].real) < 1e-8


# ---- workers, devices, storage --------------------------------------------------------------------

def test_workers_give_identical_spectra() -> None:
    M = np.stack([_planted(40, [2.0 + k], seed=k) for k in range(3)])
    one, two = spectra(M), spectra(M, workers=2)
    assert torch.equal(one.eigenvalues, two.eigenvalues) and torch.equal(one.eigenvectors, two.eigenvectors)


def test_bad_top_k_workers_and_cuda_on_cpu_build() -> None:
    M = np.eye(5)
    with pytest.raises(InvalidArgumentError, match="top_k"):
        spectra(M, top_k=0)
    with pytest.raises(InvalidArgumentError, match="workers"):
        spectra(M, workers=0)
    if not torch.cuda.is_available():
        with pytest.raises(InvalidArgumentError, match="device='cuda'.*no CUDA"):
            spectra(M, device="cuda")


def test_shared_slots_store_each_decomposition_once() -> None:
    M = np.random.default_rng(6).standard_normal((2, 8, 8))
    sp = spectra(np.stack([M[0], M[1], M[0], M[0]]), slot_ids=[0, 1, 0, 0])
    assert sp.eigenvectors.distinct.shape == (2, 8, 8)  # two decompositions for four layers
    assert sp.eigenvectors[3].data_ptr() == sp.eigenvectors[0].data_ptr()
    assert sp.eigenvectors.shape == (4, 8, 8) and torch.equal(sp.v1()[2], sp.v1()[0])


# ---- analyze --top-k / --workers / --device ---------------------------------------------------------

def test_analyze_top_k_cli_on_minilm(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from steerformer import layer_matrices
    from steerformer_cli.main import app

    model = "sentence-transformers/all-MiniLM-L6-v2"
    res = CliRunner().invoke(app, ["analyze", model, "--out", str(tmp_path), "--json", "--spectra-only",
                                   "--top-k", "6", "--layers", "0,1", "--workers", "1", "--no-plots"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["meta"]["eig"]["top_k"] == 6
    F = layer_matrices(model, [0, 1]).numpy()
    for r, Fk in zip(rep["layers"], F):
        ref = _sorted_ref(Fk)
        assert r["eig_method"].startswith("top-6")
        got = np.array([complex(*z) for z in r["top_eigenvalues"]])
        assert np.abs(got - ref[:5]).max() <= 1e-8 * abs(ref[0])
    bad = CliRunner().invoke(app, ["analyze", model, "--out", str(tmp_path), "--top-k", "6"])
    assert bad.exit_code == 2 and "--top-k" in bad.output and "--spectra-only" in bad.output
    if not torch.cuda.is_available():
        bad = CliRunner().invoke(app, ["analyze", model, "--out", str(tmp_path), "--spectra-only", "--device", "cuda"])
        assert bad.exit_code == 2 and "no CUDA" in bad.output
