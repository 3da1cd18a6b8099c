"""ODE methods are small classes on one stepping implementation; setups draw their own figures."""

from __future__ import annotations

import ast
import math
import pathlib

import numpy as np
import pytest
import scipy.linalg
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.ode import METHODS, SETUPS, SOLVERS, RungeKutta, Tableau, solve

A = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.5], [0.2, -0.3, -0.1]])
Y0 = np.array([1.0, 0.5, -0.2])


class Heun(RungeKutta):
    """Heun's second-order method: written here only from its tableau, as a new method would be."""

    name = "heun"
    adaptive = False

    def make_tableau(self) -> Tableau:
        return Tableau(np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([0.5, 0.5]), np.array([0.0, 1.0]), 2, 0)


def test_a_new_method_is_a_tableau_on_the_shared_stepper() -> None:
    T, errs = 2.0, []
    for m in (16, 32, 64):
        sol = solve(lambda t, y: y @ torch.as_tensor(A).T, torch.tensor(Y0), (0.0, T), method=Heun(), dt=T / m)
        errs.append(np.linalg.norm(sol.ys[-1].numpy() - scipy.linalg.expm(A * T) @ Y0))
        assert sol.method == "heun" and sol.n_evals == 2 * m
    rates = [math.log2(errs[i] / errs[i + 1]) for i in range(2)]
    assert all(abs(r - 2) < 0.15 for r in rates), rates
    with pytest.raises(InvalidArgumentError, match="dt"):
        solve(lambda t, y: y, torch.tensor(Y0), (0.0, 1.0), method=Heun())


def test_registry_and_tableaux_are_consistent() -> None:
    assert METHODS == ("dop853", "dopri5", "rk4") and set(SOLVERS) == set(METHODS)
    for name, m in SOLVERS.items():
        tab = m.tableau
        assert m.name == name and tab.A.shape[0] == len(tab.C) == len(tab.B)
        assert np.allclose(np.triu(tab.A), 0)  # explicit
        assert math.isclose(tab.B.sum(), 1.0) and np.allclose(tab.A.sum(1), tab.C)  # consistency conditions
        assert m.adaptive == (tab.error_order > 0)


def test_every_setup_draws_its_own_figures() -> None:
    assert all(callable(spec.draw) for spec in SETUPS.values())
    from steerformer.ode import plots

    assert not hasattr(plots, "PLOTTERS")


def test_ode_package_uses_relative_imports_only() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "steerformer" / "ode"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not (node.module or "").startswith("steerformer"), f"{path.name}: from {node.module} import"
