"""Integrators: order of accuracy against the matrix exponential, tolerance, batching, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.ode import NonFiniteStateError, solve

A = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.5], [0.2, -0.3, -0.1]])
Y0 = np.array([1.0, 0.5, -0.2])


def linear(t, y):
    return y @ torch.as_tensor(A).T


def exact(t):
    return scipy.linalg.expm(A * t) @ Y0


@pytest.mark.parametrize("method,order,steps", [("rk4", 4, (8, 16, 32)), ("dopri5", 5, (8, 16, 32)),
                                                 ("dop853", 8, (4, 8, 16))])
def test_fixed_step_order_matches_theory(method, order, steps):
    T = 2.0
    errs = []
    for m in steps:
        sol = solve(linear, torch.tensor(Y0), (0.0, T), method=method, dt=T / m)
        errs.append(np.linalg.norm(sol.ys[-1].numpy() - exact(T)))
    rates = [math.log2(errs[i] / errs[i + 1]) for i in range(len(errs) - 1)]
    assert all(abs(r - order) < 0.3 for r in rates), (errs, rates)


@pytest.mark.parametrize("method", ["dopri5", "dop853"])
def test_adaptive_meets_tolerance_at_every_save_time(method):
    ts = np.linspace(0, 3, 13)
    sol = solve(linear, torch.tensor(Y0), (0.0, 3.0), method=method, rtol=1e-10, atol=1e-12, save_at=ts)
    assert np.allclose(sol.ts.numpy(), ts)
    err = max(np.abs(sol.ys[k].numpy() - exact(t)).max() for k, t in enumerate(ts))
    assert err < 1e-8


def test_batched_runs_each_match_their_own_exponential():
    rng = np.random.default_rng(0)
    y0 = rng.standard_normal((5, 4, 3))  # 5 runs of a (4, 3) state; the field acts on the last axis
    sol = solve(linear, torch.tensor(y0), (0.0, 1.5), rtol=1e-10, atol=1e-12)
    expected = y0 @ scipy.linalg.expm(A * 1.5).T
    assert np.abs(sol.ys[-1].numpy() - expected).max() < 1e-8
    assert sol.n_steps < 40  # one shared step sequence, not one per run


def test_bad_times_and_steps_are_refused():
    y = torch.tensor(Y0)
    with pytest.raises(InvalidArgumentError, match="t1"):
        solve(linear, y, (1.0, 0.5))
    with pytest.raises(InvalidArgumentError, match="dt"):
        solve(linear, y, (0.0, 1.0), method="rk4", dt=0.0)
    with pytest.raises(InvalidArgumentError, match="dt"):
        solve(linear, y, (0.0, 1.0), method="rk4", dt=-0.1)
    with pytest.raises(InvalidArgumentError, match="dt"):
        solve(linear, y, (0.0, 1.0), method="rk4")
    with pytest.raises(InvalidArgumentError, match="method"):
        solve(linear, y, (0.0, 1.0), method="euler")
    with pytest.raises(InvalidArgumentError, match="save_at"):
        solve(linear, y, (0.0, 1.0), save_at=[0.5, 2.0])


@pytest.mark.parametrize("method,dt", [("rk4", 0.01), ("dop853", None)])
def test_blow_up_stops_and_reports_the_time(method, dt):
    # ẏ = y² from y(0) = 1 blows up at t = 1
    with pytest.raises(NonFiniteStateError) as info:
        solve(lambda t, y: y * y, torch.tensor([1.0]), (0.0, 2.0), method=method, dt=dt,
              save_at=np.linspace(0, 2, 21))
    assert 0.9 < info.value.t < 1.1  # the numerical solution lags the true blow-up at t = 1 slightly
    assert torch.isfinite(info.value.partial.ys).all()
    assert info.value.partial.ts[-1] <= info.value.t
