"""Stability over token seeds (docs/math.md §4c): `seeds=K` reports, per layer, the share of the seeds
seed..seed+K−1 in which each verdict holds — the same as K separate runs — and marks a layer that
is beyond chance in the main run but in fewer than 90 % of the seeds as unstable."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.stats import power_method_stats
from tests.models import make_model


def _planted():
    """Layer 0: F = 20 u uᵀ + Gaussian (a clear power-method step); layer 1: Gaussian."""
    model = make_model("bert", seed=0, hidden_size=32, num_attention_heads=4)
    att = model.encoder.layer[0].attention
    u = torch.randn(32, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    u /= u.norm()
    with torch.no_grad():
        att.self.value.weight.copy_(torch.eye(32, dtype=torch.float64))
        att.output.dense.weight.add_(20.0 * torch.outer(u, u))
    return model


KW = dict(n_prompts=30, n_tokens=8, full_model=False, cumulative=False, ci=0, null_draws=60)


def test_shares_over_seeds_equal_separate_runs_and_unstable_layers_are_marked() -> None:
    model = _planted()
    rep = power_method_stats(model, seed=4, seeds=3, **KW)
    runs = [power_method_stats(model, seed=s, **KW).controlled.layers for s in (4, 5, 6)]
    assert rep.controlled.meta["stability"]["seeds"] == [4, 5, 6]
    for i, rec in enumerate(rep.controlled.layers):
        for name in ("power_method_step", "beyond_chance"):
            assert rec[f"{name}_share"] == pytest.approx(np.mean([r[i][name] for r in runs]))
            assert rep.controlled.meta["stability"][name] == [[r[j][name] for j in range(2)] for r in runs]
        assert rec["unstable"] == (rec["beyond_chance"] and rec["beyond_chance_share"] < 0.9)
    assert rep.controlled.layers[0]["beyond_chance_share"] == 1.0 and not rep.controlled.layers[0]["unstable"]
    assert "over token seeds 4–6, beyond chance in ≥ 90% of the 3: [0]" in rep.summary()
    csv = rep.to_csv().splitlines()
    assert {"beyond_chance_share", "unstable", "power_method_step_share"} <= set(csv[0].split(","))


def test_seeds_with_user_tokens_is_refused() -> None:
    tokens = torch.randn(2, 3, 32, dtype=torch.float64)
    with pytest.raises(InvalidArgumentError, match="seeds=2"):
        power_method_stats(_planted(), tokens=tokens, seeds=2, **KW)
