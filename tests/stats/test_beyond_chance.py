"""The test behind "beyond chance" (docs/math.md §4c): Monte Carlo p-values, the corrections across
layers against transcriptions of their textbook procedures, and the false-positive rate on models
whose weights *are* draws of the null model."""

from __future__ import annotations

import numpy as np
import pytest

from steerformer.errors import InvalidArgumentError
from steerformer.stats import StatsConfig, power_method_stats
from steerformer.stats.testing import adjust, benjamini_hochberg, holm, monte_carlo_p
from tests.models import make_model


def test_monte_carlo_p_counts_ties_against_the_layer() -> None:
    null = np.array([[0.1, 0.9], [0.5, 0.9], [0.7, 0.9]])
    p = monte_carlo_p(np.array([0.5, 1.0]), null)
    assert p.tolist() == [(1 + 2) / 4, 1 / 4]
    assert np.isnan(monte_carlo_p(np.array([np.nan]), null[:, :1])[0])


def _bh_rejects(p, alpha):
    """Benjamini–Hochberg as printed: reject the k smallest, k the largest i with p_(i) ≤ i·α/m."""
    m = len(p)
    order = np.argsort(p)
    k = max([i + 1 for i in range(m) if p[order[i]] <= (i + 1) * alpha / m], default=0)
    return set(order[:k].tolist())


def _holm_rejects(p, alpha):
    """Holm as printed: walk up the sorted p-values, reject while p_(i) ≤ α/(m − i + 1)."""
    m = len(p)
    out = set()
    for i, j in enumerate(np.argsort(p)):
        if p[j] > alpha / (m - i):
            break
        out.add(int(j))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_adjusted_p_values_reject_what_the_printed_procedures_reject(seed) -> None:
    rng = np.random.default_rng(seed)
    p = np.where(rng.random(12) < 0.4, rng.random(12) * 0.02, rng.random(12))
    for alpha in (0.01, 0.05, 0.1, 0.2):
        assert set(np.flatnonzero(benjamini_hochberg(p) <= alpha).tolist()) == _bh_rejects(p, alpha)
        assert set(np.flatnonzero(holm(p) <= alpha).tolist()) == _holm_rejects(p, alpha)
    assert np.all(holm(p) >= benjamini_hochberg(p) - 1e-15)


def test_corrections_leave_missing_layers_out_and_name_bad_input() -> None:
    p = np.array([0.01, np.nan, 0.04])
    assert np.isnan(holm(p)[1]) and holm(p)[[0, 2]].tolist() == pytest.approx([0.02, 0.04])
    assert benjamini_hochberg(p)[[0, 2]].tolist() == pytest.approx([0.02, 0.04])
    with pytest.raises(InvalidArgumentError, match="correction='sidak'"):
        adjust(p, "sidak")
    for bad in (dict(alpha=0), dict(alpha=1.5), dict(correction="bonferroni"), dict(ci=1.0), dict(ci=-0.1),
                dict(bootstrap=10), dict(seeds=0)):
        with pytest.raises(InvalidArgumentError, match=next(iter(bad))):
            StatsConfig(**bad)


def test_gaussian_models_are_flagged_in_at_most_one_layer_in_twenty() -> None:
    """Ten tiny models whose W_Q, W_K, W_V, W_O are Gaussian with zero biases — the default
    initialisation, i.e. draws of the null model itself: at α = 0.05 after correction at most
    1 of their 20 layers may be called beyond chance (the p-values are valid: the observed layer
    is one more draw)."""
    flagged, p_values = 0, []
    for i in range(10):
        name = "bert" if i % 2 else "gpt2"
        kw = dict(hidden_size=32, num_attention_heads=4) if name == "bert" else dict(n_embd=32, n_head=4)
        model = make_model(name, seed=100 + i, **kw)
        rep = power_method_stats(model, n_prompts=20, n_tokens=8, seed=i, full_model=False, cumulative=False, ci=0,
                                 layer_norm=False)
        flagged += sum(r["beyond_chance"] for r in rep.controlled.layers)
        p_values += [r["p_delta"] for r in rep.controlled.layers]
    assert flagged <= 1
    assert 0.2 < float(np.median(p_values)) < 0.8  # not a test that can never reject: p spreads over (0, 1)
