"""Vector field and maps against naive per-token loops; manifold; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.ode import (
    AttentionField,
    continuous_field,
    discrete_step,
    oja_step,
    project,
    random_tokens,
    single_head_step,
    solve_tokens,
)


def _spd(d, rng):
    A = rng.standard_normal((d, d))
    return A @ A.T / d + np.eye(d)


def naive_field(t, Y, P, U, W, causal, scale):
    """Literal eq. (6), token by token, in numpy (columns y_i as the paper writes them)."""
    n, d = Y.shape
    out = np.zeros_like(Y)
    for i in range(n):
        g = np.zeros(d)
        for eta in range(P.shape[0]):
            js = range(i + 1) if causal else range(n)
            w = np.array([math.exp(Y[i] @ P[eta] @ Y[j]) for j in js])
            Z = scale * w.sum()
            for j, wj in zip(js, w):
                g += (wj / Z) * (U[eta] @ Y[j])
        yi = Y[i].reshape(d, 1)
        out[i] = (np.eye(d) - yi @ yi.T @ W) @ g
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("normalization", ["sqrt", "softmax"])
def test_field_matches_literal_equation(causal, normalization):
    rng = np.random.default_rng(1)
    h, n, d = 3, 5, 4
    P, U, W = rng.uniform(-1, 1, (h, d, d)), rng.uniform(-1, 1, (h, d, d)), _spd(d, rng)
    Y = project(rng.standard_normal((2, n, d)), W).numpy()
    got = AttentionField(P, U, W, causal=causal, normalization=normalization)(0.0, torch.tensor(Y)).numpy()
    scale = math.sqrt(d) if normalization == "sqrt" else 1.0
    for b in range(2):
        assert np.abs(got[b] - naive_field(0, Y[b], P, U, W, causal, scale)).max() < 1e-13


def test_identity_U_and_time_varying_callables_agree_with_constants():
    rng = np.random.default_rng(2)
    P = rng.uniform(-1, 1, (2, 3, 3))
    Y = random_tokens((4, 3), generator=torch.Generator().manual_seed(0))
    f_const = continuous_field(0.7, Y, P, np.stack([np.eye(3)] * 2))
    f_id = continuous_field(0.7, Y, lambda t: torch.tensor(P), None)
    assert torch.allclose(f_const, f_id, atol=1e-15)


def test_field_is_the_first_order_limit_of_the_discrete_model():
    # (π_W(y + τ f) − y)/τ → ẏ as τ → 0 (the derivation of (6) from (1)), with error O(τ)
    rng = np.random.default_rng(3)
    h, n, d = 2, 4, 3
    P, U, W = rng.uniform(-1, 1, (h, d, d)), rng.uniform(-1, 1, (h, d, d)), _spd(d, rng)
    Y = project(rng.standard_normal((n, d)), W)
    ydot = continuous_field(0.0, Y, P, U, W, causal=True)
    errs = []
    for tau in (1e-3, 1e-4):
        step = discrete_step(Y, P, U, W, tau=tau, causal=True, normalization="sqrt")
        errs.append(float(((step - Y) / tau - ydot).abs().max()))
    assert errs[1] < errs[0] / 5 and errs[1] < 1e-3


def test_single_head_and_oja_maps_match_their_formulas():
    rng = np.random.default_rng(4)
    n, d = 5, 3
    V, QK = rng.uniform(-1, 1, (d, d)), rng.uniform(-1, 1, (d, d))
    X = project(rng.standard_normal((n, d))).numpy()
    S = X @ QK @ X.T
    A = np.exp(S) / np.exp(S).sum(1, keepdims=True)
    z = X + 0.3 * (A @ X) @ V.T
    assert np.abs(single_head_step(X, V, QK, tau=0.3).numpy() - z / np.linalg.norm(z, axis=1, keepdims=True)).max() < 1e-14
    z = X + 0.3 * X.mean(0) @ V.T
    assert np.abs(oja_step(X, V, tau=0.3).numpy() - z / np.linalg.norm(z, axis=1, keepdims=True)).max() < 1e-14


def test_tokens_stay_on_the_ellipsoid():
    rng = np.random.default_rng(5)
    d = 4
    W = _spd(d, rng)
    P0 = torch.tensor(rng.uniform(-1, 1, (2, d, d)))
    field = AttentionField(lambda t: P0 * math.cos(3 * t), rng.uniform(-1, 1, (2, d, d)), W)
    y0 = project(rng.standard_normal((3, 6, d)), W)
    for kw in ({"method": "dop853", "rtol": 1e-6}, {"method": "rk4", "dt": 0.05}):
        sol = solve_tokens(field, y0, (0.0, 5.0), save_at=np.linspace(0, 5, 11), **kw)
        Wt = torch.tensor(W)
        drift = ((sol.ys * (sol.ys @ Wt)).sum(-1).sqrt() - 1).abs().max()
        assert float(drift) < 1e-10 and sol.max_drift < 1e-10


def test_bad_input_is_refused_with_the_argument_named():
    rng = np.random.default_rng(6)
    P = rng.uniform(-1, 1, (2, 3, 3))
    y = random_tokens((4, 3))
    with pytest.raises(InvalidArgumentError, match="W=.*symmetric"):
        AttentionField(P, W=np.array([[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]]))
    with pytest.raises(InvalidArgumentError, match="smallest eigenvalue"):
        AttentionField(P, W=np.diag([1.0, -1.0, 1.0]))
    with pytest.raises(InvalidArgumentError, match="P=.*shape"):
        AttentionField(rng.uniform(size=(2, 3, 4)))
    with pytest.raises(InvalidArgumentError, match="U=.*one per head"):
        AttentionField(P, U=np.eye(3))
    with pytest.raises(InvalidArgumentError, match="U=.*3×3"):
        AttentionField(P, U=np.stack([np.eye(4)] * 2))
    with pytest.raises(InvalidArgumentError, match="y0=.*dimension"):
        solve_tokens(AttentionField(P), random_tokens((4, 5)), (0, 1))
    with pytest.raises(InvalidArgumentError, match="y0=.*ellipsoid"):
        solve_tokens(AttentionField(P), 2 * y, (0, 1))
    with pytest.raises(InvalidArgumentError, match="y0=.*ellipsoid"):  # on the sphere, not on E_W
        solve_tokens(AttentionField(P, W=np.diag([1.0, 2.0, 3.0])), y, (0, 1))
    with pytest.raises(InvalidArgumentError, match="y0=.*finite"):
        solve_tokens(AttentionField(P), y * float("nan"), (0, 1))
    with pytest.raises(InvalidArgumentError, match="t1"):
        solve_tokens(AttentionField(P), y, (1.0, 0.0))
    with pytest.raises(InvalidArgumentError, match="normalization"):
        AttentionField(P, normalization="layernorm")
    with pytest.raises(InvalidArgumentError, match="tau"):
        discrete_step(y, P, tau=0.0)
