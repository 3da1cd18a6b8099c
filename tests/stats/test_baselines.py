"""Statistics against independent computations: baselines over the numerical rank (docs/math.md §1b),
ρ_S independent of an eigenvector's phase (λ1 real, λ2 complex)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from steerformer.spectra import spectra
from steerformer.stats import alignment_stats
from steerformer.stats.eigenbasis import chance_rho_S


def _tokens(P: int, n: int, d: int, seed: int) -> torch.Tensor:
    x = torch.randn(P, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def test_baselines_average_over_the_numerical_rank_only() -> None:
    d, r = 12, 4
    g = np.random.default_rng(3)
    F = g.normal(size=(d, r)) @ g.normal(size=(r, d))  # rank 4: 8 eigenvalues are rounding noise
    x0 = _tokens(5, 6, d, 0)
    y = x0 + 0.3 * torch.as_tensor(x0.numpy() @ F.T)
    x1 = y / y.norm(dim=-1, keepdim=True)
    states = torch.stack([x0, x1])
    sp = spectra(torch.as_tensor(F)[None])
    rec = alignment_stats(states, sp, cumulative=False).layers[0]
    assert rec["numerical_rank"] == 4
    # Independent: numpy's eig, keep |λ| > 1e-8 max|λ|, a conjugate pair once through span{Re v, Im v}.
    lam, V = np.linalg.eig(F)
    keep = np.abs(lam) > 1e-8 * np.abs(lam).max()
    assert keep.sum() == 4
    a, b = x0.reshape(-1, d).numpy(), x1.reshape(-1, d).numpy()
    deltas = []
    for j in np.flatnonzero(keep):
        if lam[j].imag < -1e-10:
            continue  # the partner of a pair already counted
        Q, _ = np.linalg.qr(np.stack([V[:, j].real, V[:, j].imag], 1) if abs(lam[j].imag) > 1e-10 else V[:, j].real[:, None])
        rho = lambda z: np.linalg.norm(z @ Q, axis=1) / np.linalg.norm(z, axis=1)  # noqa: E731
        deltas.append(rho(b) - rho(a))
    D = np.stack(deltas, 1)
    assert rec["baseline_delta_mean"] == pytest.approx(D.mean(), abs=1e-12)
    assert rec["baseline_P"] == pytest.approx((D > 0).mean(), abs=1e-12)
    assert rec["n_real_directions"] + rec["n_pair_directions"] == D.shape[1]


def test_rho_S_does_not_depend_on_the_phase_of_v2() -> None:
    # F with real dominant λ1 = 3 and a complex pair λ2,3 = 2 ± 1.5i next in Re λ.
    d = 8
    g = np.random.default_rng(5)
    Q, _ = np.linalg.qr(g.normal(size=(d, d)))
    blocks = np.zeros((d, d))
    blocks[0, 0] = 3.0
    blocks[1:3, 1:3] = [[2.0, 1.5], [-1.5, 2.0]]
    blocks[3:, 3:] = np.diag(g.uniform(-1, 1, size=d - 3))
    F = Q @ blocks @ Q.T
    x0 = _tokens(4, 5, d, 1)
    y = x0 + torch.as_tensor(x0.numpy() @ F.T)
    states = torch.stack([x0, y / y.norm(dim=-1, keepdim=True)])
    sp = spectra(torch.as_tensor(F)[None])
    base = alignment_stats(states, sp, cumulative=False)
    rec = base.layers[0]
    assert rec["subspace"] == "v1pair" and rec["subspace_dim"] == 3
    # Independent: S = span{q0, q1, q2} (the planted invariant subspace).
    x1 = states[1].reshape(-1, d).numpy()
    expect = np.linalg.norm(x1 @ Q[:, :3], axis=1) / np.linalg.norm(x1, axis=1)
    assert rec["rho_S_mean"] == pytest.approx(expect.mean(), abs=1e-12)
    for theta in (0.4, 1.3, 2.9):
        rot = spectra(torch.as_tensor(F)[None])
        j = rot.index2[0]
        rot.eigenvectors[0, :, j] *= complex(math.cos(theta), math.sin(theta))
        got = alignment_stats(states, rot, cumulative=False).layers[0]
        assert got["rho_S_mean"] == pytest.approx(rec["rho_S_mean"], abs=1e-12)


def test_chance_level_of_rho_S_matches_monte_carlo() -> None:
    d = 10
    x = np.random.default_rng(0).normal(size=(400_000, d))
    r = np.linalg.norm(x, axis=1)
    for s in (1, 2, 3):
        mc = (np.linalg.norm(x[:, :s], axis=1) / r).mean()
        assert chance_rho_S(s, d) == pytest.approx(mc, abs=2e-3)
    assert chance_rho_S(1, 2) == pytest.approx(2 / math.pi)  # E|cos θ| on the circle
