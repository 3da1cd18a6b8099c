"""E, V, alignment, Wendel's probability against Monte Carlo and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from steerformer.ode import (
    alignment,
    consensus_error,
    consensus_time,
    lyapunov,
    wendel_monte_carlo,
    wendel_probability,
)


def test_wendel_two_points_on_the_circle_is_one():
    # the papers' printed sum (to n − 1) would give 1/2 here
    assert wendel_probability(2, 1) == 1.0


@pytest.mark.parametrize("ell,n,expected", [(3, 1, 0.75), (4, 2, 7 / 8), (10, 2, 46 / 512), (5, 4, 1.0)])
def test_wendel_closed_form_values(ell, n, expected):
    assert wendel_probability(ell, n) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("ell,n", [(3, 1), (5, 2), (6, 2), (8, 3), (10, 4)])
def test_wendel_agrees_with_monte_carlo_within_three_sigma(ell, n):
    p_hat, se = wendel_monte_carlo(ell, n, samples=3000, seed=ell * 10 + n)
    p = wendel_probability(ell, n)
    assert abs(p_hat - p) <= 3 * math.sqrt(p * (1 - p) / 3000) + 1e-12, (p_hat, p, se)


def test_E_V_and_alignment_closed_forms():
    y = np.array([[1.0, 0, 0], [0, 1.0, 0], [-1.0, 0, 0]])
    assert float(consensus_error(y)) == pytest.approx(1 - (1 + 0 - 1) / 3)
    assert float(lyapunov(y, [1.0, 0, 0])) == pytest.approx(2.0)
    assert np.allclose(alignment(y, [2.0, 0, 0]).numpy(), [1, 0, 1])
    assert float(consensus_error(np.tile([0.6, 0.8, 0], (4, 1)))) == pytest.approx(0.0, abs=1e-15)


def test_consensus_time_is_the_first_time_it_stays_below():
    t = np.arange(6.0)
    E = np.array([[1, 1], [1e-7, 1], [1e-3, 1], [1e-8, 1e-8], [1e-9, 1e-9], [1e-9, 1e-9]])
    assert np.array_equal(consensus_time(t, E, 1e-6), [3.0, 3.0])
    assert np.isnan(consensus_time(t, np.ones((6, 1)), 1e-6)[0])
