"""Analytic eigenvalues of docs/math.md §8 against autograd and finite-difference Jacobians."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from steerformer.errors import InvalidArgumentError
from steerformer.ode import (
    bipartite_eigenvalues,
    bipartite_point,
    bipartite_stability,
    consensus_eigenvalues,
    consensus_point,
    discrete_step,
    find_equilibria,
    oja_step,
    run_setup,
    schur_cohen_stable,
    single_head_step,
    tangent_eigenvalues,
)


def _max_mismatch(a, b):
    """Largest distance under the best one-to-one pairing of two spectra."""
    assert len(a) == len(b)
    D = np.abs(np.asarray(a)[:, None] - np.asarray(b)[None, :])
    r, c = linear_sum_assignment(D)
    return D[r, c].max()


def _instance(seed, d=4):
    rng = np.random.default_rng(seed)
    A = rng.uniform(-0.5, 0.5, (d, d))
    V = (A + A.T) / 2
    QK = rng.uniform(-1, 1, (d, d))
    tau = 0.9 / np.abs(np.linalg.eigvalsh(V)).max()  # τ < 1/‖V‖ as Theorem 3 assumes
    return V, QK, tau


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_consensus_eigenvalues_match_numeric_jacobians(seed):
    V, QK, tau = _instance(seed)
    n = 5
    for m in range(V.shape[0]):
        x = consensus_point(V, m, n)
        analytic = consensus_eigenvalues(V, m, n, tau)
        assert len(analytic) == n * (V.shape[0] - 1)
        for step in (lambda z: oja_step(z, V, tau=tau), lambda z: single_head_step(z, V, QK, tau=tau)):
            assert _max_mismatch(tangent_eigenvalues(step, x), analytic) < 1e-9
        # the multi-head map (3) at consensus: same spectrum with F = Σ U_η in place of V
        U = np.stack([V / 3 + e for e in (np.eye(4) * 0.1, -np.eye(4) * 0.05, -np.eye(4) * 0.05)])
        step3 = lambda z: discrete_step(z, np.stack([QK, QK.T, -QK]), U, tau=tau)
        assert _max_mismatch(tangent_eigenvalues(step3, x), analytic) < 1e-9


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n1,n2", [(4, 2), (3, 3), (5, 1)])
def test_bipartite_eigenvalues_match_autograd_and_finite_differences(seed, n1, n2):
    V, QK, tau = _instance(seed)
    step = lambda z: single_head_step(z, V, QK, tau=tau)
    for m in range(V.shape[0]):
        x = bipartite_point(V, m, n1, n2)
        assert float((step(x) - x).abs().max()) < 1e-13  # it is an equilibrium
        analytic = bipartite_eigenvalues(V, QK, m, n1, n2, tau)
        assert _max_mismatch(tangent_eigenvalues(step, x), analytic) < 1e-9
        if m == 0 and seed == 0:
            assert _max_mismatch(tangent_eigenvalues(step, x, method="fd"), analytic) < 1e-6


def test_schur_cohen_agrees_with_eigenvalues():
    rng = np.random.default_rng(7)
    for _ in range(200):
        M = rng.uniform(-1.5, 1.5, (2, 2))
        assert schur_cohen_stable(M) == bool(np.abs(np.linalg.eigvals(M)).max() < 1)
    with pytest.raises(InvalidArgumentError):
        schur_cohen_stable(np.eye(3))


def test_theorem_3_verdict_matches_the_numeric_spectral_radius():
    rng = np.random.default_rng(8)
    Q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    V = Q @ np.diag([1.0, 0.4, -0.5]) @ Q.T
    for s in (0.5, 0.9, 0.97, 1.5):
        rep = bipartite_stability(V, s * np.eye(3), 0, 8, 2, 0.9)
        x = bipartite_point(V, 0, 8, 2)
        rho = np.abs(tangent_eigenvalues(lambda z: single_head_step(z, V, s * np.eye(3), tau=0.9), x)).max()
        assert rep.stable == (rho < 1)


def test_fig13b_small_perturbation_returns_larger_escapes():
    r = run_setup("fig13b", runs=2)
    assert r.findings["theorem3_stable"] and r.findings["spectral_radius"] < 1
    assert r.series["distance_small"][-1].max() < 1e-6  # back to the bipartite point
    comp = r.series["v1_component_large"][-1]  # (runs, n): every token at +v1 — consensus
    assert np.abs(comp - 1).max() < 1e-6


def test_find_equilibria_lists_only_true_fixed_points():
    V, QK, tau = _instance(3, d=3)
    step = lambda z: single_head_step(z, V, QK, tau=tau)
    eqs = find_equilibria(step, V, 4, with_eigenvalues=True)
    assert {e.kind for e in eqs} == {"consensus", "bipartite"}
    principal = [e for e in eqs if e.kind == "consensus" and e.m == 0]
    assert principal and principal[0].stable  # Theorem 3: v1-consensus is stable
    assert all(not e.stable for e in eqs if e.kind == "consensus" and e.m > 0)


def test_non_symmetric_V_is_refused():
    with pytest.raises(InvalidArgumentError, match="symmetric"):
        consensus_eigenvalues(np.array([[1.0, 2.0], [0.0, 1.0]]), 0, 3, 0.5)
