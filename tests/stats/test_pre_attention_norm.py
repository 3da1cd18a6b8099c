"""Pre-LN models: the statistics run with and without the model's pre-attention norm by default."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from steerformer.adapters import get_adapter
from steerformer.analyze import analyze
from steerformer.stats import power_method_stats
from tests.models import make_model

KW = dict(n_prompts=6, n_tokens=5, full_model=False, cumulative=False, null_draws=0)


def _rho(x: np.ndarray, F: np.ndarray) -> np.ndarray:
    lam, V = np.linalg.eig(F)
    j = int(np.argmax(lam.real))
    assert abs(lam[j].imag) < 1e-10  # this tiny model's λ1 is real
    v = V[:, j].real / np.linalg.norm(V[:, j].real)
    return np.abs(x @ v) / np.linalg.norm(x, axis=-1)


@torch.no_grad()
def test_both_variants_by_default_and_the_norm_variant_is_the_modules_own() -> None:
    model = make_model("gpt2-base")
    rep = power_method_stats(model, bias=True, **KW)
    assert rep.options["layer_norm_both"] and rep.options["layer_norm"] is False
    ln = rep.controlled_layer_norm
    assert ln is not None and set(rep.variants()) == {"controlled", "controlled_layer_norm"}
    # Independent: layer 0 with the model's own ln_1 and attention module (biases kept), causal mask.
    x = rep.controlled.per_token["rho_before"]  # same initial tokens in both variants
    np.testing.assert_array_equal(ln.per_token["rho_before"][0], x[0])
    from steerformer.dynamics import random_tokens

    x0 = random_tokens(6, 5, 64, seed=0)
    block = model.h[0]
    mask = get_adapter(model.config).block_attention_mask(0, 5, torch.float64)
    out = block.attn(block.ln_1(x0), attention_mask=mask)
    y = x0 + (out[0] if isinstance(out, tuple) else out)
    y = (y / y.norm(dim=-1, keepdim=True)).reshape(-1, 64).numpy()
    c = model.h[0].attn.c_attn.weight.numpy()[:, 128:]  # Conv1D (in, out): value part
    F = (c @ model.h[0].attn.c_proj.weight.numpy()).T
    assert ln.layers[0]["rho_mean"] == pytest.approx(_rho(y, F).mean(), abs=1e-12)
    # One variant when asked for one.
    only = power_method_stats(model, layer_norm=True, **KW)
    assert only.controlled_layer_norm is None and only.options["layer_norm"] is True
    # Post-LN models have no pre-attention norm: one variant.
    assert power_method_stats(make_model("bert"), **KW).controlled_layer_norm is None


def test_report_json_and_figure_carry_both(tmp_path) -> None:
    rep = analyze(make_model("gpt2-base"), **KW)
    rep.save(tmp_path)
    d = json.loads((tmp_path / "report.json").read_text())
    assert {"controlled", "controlled_layer_norm"} <= set(d["power_method"])
    rows = (tmp_path / "alignment.csv").read_text().splitlines()
    assert any(r.startswith("controlled_layer_norm,") for r in rows)
    assert (tmp_path / "power_method.png").stat().st_size > 0
