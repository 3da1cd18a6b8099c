"""The theorems the setups illustrate, at the papers' or reduced sizes."""

from __future__ import annotations

import numpy as np
import torch

from steerformer.ode import (
    AttentionField,
    consensus_error,
    in_open_hemisphere,
    random_tokens,
    run_setup,
    solve_tokens,
)
from steerformer.ode.experiments import p_512


def test_theorem_3_2_lyapunov_never_increases_5_1_1():
    r = run_setup("5.1.1", runs=3, seed=1)
    V = r.series["V"]  # (T, runs), V = max_i(1 − vᵀy_i) with v = (1, 0, 0)
    assert r.findings["start_in_hemisphere"]
    assert np.diff(V, axis=0).max() <= 1e-10  # Theorem 3.2: V is non-increasing
    assert V[-1].max() < V[0].min()
    assert r.findings["E_final_max"] < 1e-6  # consensus
    assert r.findings["max_manifold_drift"] < 1e-10


def test_theorem_4_2_every_token_goes_to_the_first_one():
    # 5.1.2 at reduced size: causal, 2 heads, U = I, |2 sin(ωt + φ)| modulation, S^19
    g = torch.Generator().manual_seed(0)
    n, d = 8, 20
    field = AttentionField(p_512(d, 2, g), causal=True)
    y0 = random_tokens((4, n, d), generator=g, distribution="uniform")
    sol = solve_tokens(field, y0, (0.0, 150.0), rtol=1e-8, save_at=np.linspace(0, 150, 31))
    E = consensus_error(sol.ys).numpy()
    assert E[0].min() > 0.3 and E[-1].max() < 1e-6  # E → 0
    assert torch.linalg.vector_norm(sol.ys[-1] - y0[:, :1], dim=-1).max() < 1e-3  # y_i → y_1(0)
    assert torch.linalg.vector_norm(sol.ys[-1][:, 0] - y0[:, 0], dim=-1).max() < 1e-12  # y_1 fixed


def test_theorem_4_5_tokens_go_to_the_top_eigenvector_of_U():
    r = run_setup("5.1.3", runs=3, seed=2)
    U = np.array([[-0.2590, 0.4965, 0.5609], [0.4965, -0.7174, -0.5003], [0.5609, -0.5003, -0.0247]])
    lam, vec = np.linalg.eigh(U)
    v = vec[:, -1] * np.sign(vec[0, -1])
    assert np.allclose(lam, [-1.418, -0.021, 0.439], atol=1e-3)  # as docs/math.md lists them
    traj = r.trajectory["tokens"]  # (T, runs, n, 3)
    assert (traj[0] @ v).min() > 0  # starts in the hemisphere vᵀy > 0
    assert np.linalg.norm(traj[-1] - v, axis=-1).max() < 1e-4  # every token → +v
    assert r.findings["V1_final_max"] < 1e-8 and r.findings["V2_final_max"] < 1e-8


def test_theorem_4_5_mirror_start_goes_to_minus_v():
    U = torch.tensor([[-0.2590, 0.4965, 0.5609], [0.4965, -0.7174, -0.5003], [0.5609, -0.5003, -0.0247]],
                     dtype=torch.float64)
    from steerformer.ode.experiments import p_513

    v = torch.linalg.eigh(U)[1][:, -1]
    y0 = random_tokens((2, 10, 3), generator=torch.Generator().manual_seed(3), hemisphere=-v)
    sol = solve_tokens(AttentionField(p_513, U, causal=True), y0, (0.0, 60.0), rtol=1e-8)
    assert torch.linalg.vector_norm(sol.ys[-1] + v, dim=-1).max() < 1e-4


def test_hemisphere_test_on_known_configurations():
    e = np.eye(3)
    assert in_open_hemisphere(np.array([e[0], e[1], e[2]]))
    assert not in_open_hemisphere(np.array([e[0], -e[0]]))  # antipodal: no open hemisphere
    assert not in_open_hemisphere(np.array([e[0], e[1], -(e[0] + e[1]) / np.sqrt(2)]))
