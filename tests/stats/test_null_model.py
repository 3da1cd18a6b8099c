"""The null model of the power-method verdict (docs/math.md §4b) on a tiny model whose verdict is known
by construction: a layer with a planted dominant eigenvector passes beyond chance, a Gaussian
layer does not."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from steerformer.loading import open_source
from steerformer.matrices import read_attention_weights
from steerformer.stats import power_method_stats
from steerformer.stats.null import null_weights
from tests.models import make_model


def _planted(seed: int = 0):
    model = make_model("bert", seed=seed, hidden_size=32, num_attention_heads=4)
    att = model.encoder.layer[0].attention
    d = 32
    u = torch.randn(d, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    u /= u.norm()
    with torch.no_grad():
        att.self.value.weight.copy_(torch.eye(d, dtype=torch.float64))
        # F = 20 u uᵀ + a Gaussian matrix (std 0.3): full rank, λ1 ≈ 20 along u
        att.output.dense.weight.add_(20.0 * torch.outer(u, u))
    return model


KW = dict(n_prompts=20, n_tokens=10, full_model=False, cumulative=False)


def test_planted_layer_is_beyond_chance_and_gaussian_layer_is_not() -> None:
    rep = power_method_stats(_planted(), **KW)
    planted, gaussian = rep.controlled.layers
    assert planted["power_method_step"] and planted["beyond_chance"]
    assert planted["delta_rho_mean"] > planted["null_delta_mean"] + 2 * planted["null_delta_std"]
    assert not gaussian["beyond_chance"]
    assert rep.summary().startswith("2 of 2 layers act as a power-method step; 1 of them beyond chance")
    csv = rep.to_csv().splitlines()
    head = csv[0].split(",")
    assert {"null_delta_mean", "null_delta_std", "null_P_mean", "null_P_std", "beyond_chance"} <= set(head)
    assert csv[1].split(",")[head.index("beyond_chance")] == "True"
    off = power_method_stats(_planted(), null_draws=0, **KW)
    assert "beyond_chance" not in off.controlled.layers[0] and off.options["null_draws"] == 0


def test_null_draw_is_the_stats_of_a_model_with_those_weights() -> None:
    """Independent path: write draw 0 into a copy of the model (biases zero) and run the ordinary
    statistics on it; its Δρ and P are the null model's numbers for K = 1."""
    model = _planted()
    src = open_source(model)
    w = read_attention_weights(src)
    drawn = null_weights(w, 0)
    for k in w:  # layout, std and zero biases
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            a, b = getattr(w[k], name), getattr(drawn[k], name)
            assert a.shape == b.shape and float(b.std()) == pytest.approx(float(a.std()), rel=0.15)
        assert drawn[k].b_Q is None and drawn[k].b_V is None and drawn[k].b_O is None
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for k, layer in enumerate(twin.encoder.layer):
            s, o = layer.attention.self, layer.attention.output
            for lin, name in ((s.query, "W_Q"), (s.key, "W_K"), (s.value, "W_V")):
                lin.weight.copy_(getattr(drawn[k], name).reshape(-1, 32))
                lin.bias.zero_()
            o.dense.weight.copy_(torch.cat(list(drawn[k].W_O), dim=1))
            o.dense.bias.zero_()
    ref = power_method_stats(twin, null_draws=0, **KW).controlled.layers
    got = power_method_stats(model, null_draws=1, **KW).controlled.layers
    for r, g in zip(ref, got):
        assert g["null_delta_mean"] == pytest.approx(r["delta_rho_mean"], abs=1e-12)
        assert g["null_P_mean"] == pytest.approx(r["P"], abs=1e-12)
        assert g["null_delta_std"] == 0.0


def test_null_draws_is_checked() -> None:
    from steerformer.errors import InvalidArgumentError
    from steerformer.stats import StatsConfig

    with pytest.raises(InvalidArgumentError, match="null_draws=-1"):
        StatsConfig(null_draws=-1)
    assert np.isclose(StatsConfig().null_draws, 100)
