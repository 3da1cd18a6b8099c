"""Power-method statistics against independent computations (numpy eig, least-squares projectors,
the models' own forward passes) on constructed cases with planted eigenvectors."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from steerformer import layer_matrices, run_dynamics, spectra
from steerformer.errors import InvalidArgumentError
from steerformer.stats import alignment_stats, eigen_directions, principal_eigvec

from tests.models import make_model

D = 64  # width of the tiny models




def planted_matrix(top: np.ndarray, rng: np.random.Generator, rest: float = 0.3) -> np.ndarray:
    """A = Q blockdiag(top, small random eigenvalues) Q⁻¹ — ``top`` (1×1 or 2×2) carries the
    dominant eigenvalue(s) along Q's first column(s)."""
    k = top.shape[0]
    Q = rng.standard_normal((D, D))
    Bm = np.diag(rng.uniform(-rest, rest, D))
    Bm[:k, :k] = top
    return Q @ Bm @ np.linalg.inv(Q), Q


def plant(model, layer_paths: list[str], A: list[np.ndarray]) -> None:
    """value = I, output dense = A (biases zero) so that F = dense.weight @ value.weight = A."""
    base = model.base_model
    with torch.no_grad():
        for path, a in zip(layer_paths, A):
            attn = base.get_submodule(path)
            value = attn.self.value if hasattr(attn, "self") else attn.value
            dense = attn.output.dense if hasattr(attn, "output") else attn.dense
            value.weight.copy_(torch.eye(D))
            value.bias.zero_()
            dense.weight.copy_(torch.from_numpy(a))
            dense.bias.zero_()


def corr_subspace(x: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """‖Π x‖/‖x‖ for each row of x, Π the orthogonal projector on span(cols) by least squares."""
    coef, *_ = np.linalg.lstsq(cols, x.T, rcond=None)
    return np.linalg.norm(cols @ coef, axis=0) / np.linalg.norm(x, axis=1)


def hand_statistics(F: np.ndarray, xb: np.ndarray, xa: np.ndarray) -> dict:
    """Independent statistics of one layer: numpy eig, loop over eigenvalues, lstsq projectors."""
    vals, vecs = np.linalg.eig(F)
    j1 = int(np.argmax(vals.real + 1e-9 * np.sign(vals.imag)))
    rows_b, rows_a = [], []
    done = set()
    for j in range(len(vals)):
        if j in done:
            continue
        v = vecs[:, j]
        if abs(vals[j].imag) < 1e-9:
            cols = v.real[:, None]
        else:
            partner = int(np.argmin(np.abs(vals - np.conj(vals[j])) + (np.arange(len(vals)) == j)))
            done.add(partner)
            cols = np.stack([v.real, v.imag], 1)
        done.add(j)
        rows_b.append(corr_subspace(xb, cols))
        rows_a.append(corr_subspace(xa, cols))
    rb, ra = np.array(rows_b), np.array(rows_a)
    v1 = vecs[:, j1].real
    rho_b = np.abs(xb @ v1) / np.linalg.norm(xb, axis=1) / np.linalg.norm(v1)
    rho_a = np.abs(xa @ v1) / np.linalg.norm(xa, axis=1) / np.linalg.norm(v1)
    return {"rho_mean": rho_a.mean(), "delta_rho_mean": (rho_a - rho_b).mean(), "P": (rho_a > rho_b).mean(),
            "baseline_rho_mean": ra.mean(), "baseline_delta_mean": (ra - rb).mean(), "baseline_P": (ra > rb).mean(),
            "rho_before_mean": rho_b.mean()}


def test_two_planted_layers_match_hand_computation_and_rho_rises() -> None:
    rng = np.random.default_rng(1)
    model = make_model("bert")
    A0, Q = planted_matrix(np.array([[4.0]]), rng)
    # Second layer: same planted direction, different remaining spectrum.
    A1 = Q @ np.diag(np.r_[3.0, rng.uniform(-0.3, 0.3, D - 1)]) @ np.linalg.inv(Q)
    plant(model, ["encoder.layer.0.attention", "encoder.layer.1.attention"], [A0, A1])
    lm = layer_matrices(model)
    assert np.allclose(lm.matrices.numpy(), np.stack([A0, A1]), atol=1e-10)
    traj = run_dynamics(model, n_prompts=30, n_tokens=6, seed=3)
    st = alignment_stats(traj, spectra(lm), matrices=lm)
    X = traj.states.reshape(3, -1, D).numpy()
    for k, F in enumerate((A0, A1)):
        hand = hand_statistics(F, X[k], X[k + 1])
        for key, val in hand.items():
            assert st.layers[k][key] == pytest.approx(val, abs=1e-9), (k, key)
    u = Q[:, 0] / np.linalg.norm(Q[:, 0])
    rho_u = [np.mean(np.abs(X[k] @ u)) for k in range(3)]
    assert rho_u[0] < rho_u[1] < rho_u[2]
    assert st.layers[0]["rho_before_mean"] < st.layers[0]["rho_mean"] < st.layers[1]["rho_mean"]
    assert st.n_power_steps == 2 and st.summary().startswith("2 of 2 layers")


def _albert_planted(top: np.ndarray, seed: int):
    rng = np.random.default_rng(seed)
    model = make_model("albert")
    A, Q = planted_matrix(top, rng)
    plant(model, ["encoder.albert_layer_groups.0.albert_layers.0.attention"], [A])
    return model, A, Q


def test_albert_planted_real_eigenvalue_prolonged_converges() -> None:
    model, A, Q = _albert_planted(np.array([[2.0]]), seed=2)
    lm = layer_matrices(model)
    traj = run_dynamics(model, n_prompts=20, n_tokens=5, seed=0, repeat=50)  # 4 layers × 50 = 200 steps
    st = alignment_stats(traj, spectra(lm), matrices=lm)
    assert len(st.layers) == 200
    u = Q[:, 0] / np.linalg.norm(Q[:, 0])
    last = traj.states[-1].reshape(-1, D).numpy()
    rho_hand = np.abs(last @ u)
    assert np.mean(rho_hand > 0.99) >= 0.95
    assert np.allclose(st.per_token["rho"][-1], rho_hand, atol=1e-8)
    # The cumulative product of a shared layer is F^k: its principal eigenvector is v1 itself.
    assert st.layers[-1]["cumulative_rho_mean"] == pytest.approx(st.layers[-1]["rho_mean"], abs=1e-6)
    assert st.layers[-1]["distance_mean"] < 1e-2 < st.meta["distance_initial"]["mean"]


def test_albert_planted_complex_pair_rotates_in_its_plane() -> None:
    r, th = 2.0, 1.0
    model, A, Q = _albert_planted(r * np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]]), seed=4)
    lm = layer_matrices(model)
    sp = spectra(lm)
    assert sp.case[0] == 2
    traj = run_dynamics(model, n_prompts=20, n_tokens=5, seed=0, repeat=50)
    st = alignment_stats(traj, sp, cumulative=False)
    assert st.layers[-1]["subspace"] == "pair"
    last = traj.states[-1].reshape(-1, D).numpy()
    rho_S_hand = corr_subspace(last, Q[:, :2])
    assert np.mean(rho_S_hand > 0.99) >= 0.95
    assert np.allclose(st.per_token["rho_S"][-1], rho_S_hand, atol=1e-8)
    re_v1 = np.array([r_["rho_re_v1_mean"] for r_ in st.layers[-20:]])
    assert re_v1.max() - re_v1.min() > 0.3  # keeps oscillating: no convergence to a fixed direction


def test_directions_count_each_conjugate_pair_once() -> None:
    rng = np.random.default_rng(0)
    F = rng.standard_normal((9, 9))
    sp = spectra(torch.from_numpy(F))
    dirs = eigen_directions(sp.eigenvalues[0], sp.eigenvectors[0])
    vals = np.linalg.eigvals(F)
    n_real = int(np.sum(np.abs(vals.imag) < 1e-9))
    assert dirs.n_groups == n_real + (9 - n_real) // 2
    assert int((~dirs.is_pair).sum()) == n_real


def test_arnoldi_principal_eigvec_matches_dense_eig() -> None:
    rng = np.random.default_rng(5)
    M = rng.standard_normal((120, 120))
    M[:, 0] *= 0  # keep it generic but not symmetric
    M += 15 * np.outer(rng.standard_normal(120), rng.standard_normal(120)) / 120
    lam, w = principal_eigvec(M)
    vals, vecs = np.linalg.eig(M)
    j = int(np.argmax(np.abs(vals)))
    assert lam == pytest.approx(complex(vals[j]), rel=1e-8)
    assert abs(np.vdot(vecs[:, j], w)) == pytest.approx(1.0, abs=1e-8)


def test_bad_states_name_the_problem() -> None:
    model = make_model("bert")
    lm = layer_matrices(model)
    sp = spectra(lm)
    with pytest.raises(InvalidArgumentError, match="width d=64"):
        alignment_stats(torch.ones(3, 2, 4, 5), sp)
    x = torch.ones(3, 2, 4, D, dtype=torch.float64)
    x[1, 0, 2] = 0
    with pytest.raises(InvalidArgumentError, match="zero vector at step 1, token 2"):
        alignment_stats(x, sp)
    with pytest.raises(InvalidArgumentError, match="repeat"):
        run_dynamics(model, repeat=0)
    with pytest.raises(InvalidArgumentError, match="bins"):
        alignment_stats(run_dynamics(model, n_prompts=2, n_tokens=2), sp, bins=0)
