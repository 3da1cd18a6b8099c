"""The model card states the formula of the module the steer actually edited (the bias or the
weight of an MLP output, the paper's rank-1 edit of an attention output), the gain in the unit the
CLI printed (α × residual norm for the KL edit), and which KL the budget bounds."""

from __future__ import annotations

import numpy as np
import torch

from steerformer.configs import DEFAULT_MAX_KL

from steerformer.steering import save_steered, steer
from tests.models import make_model


def _changed(before: dict, model) -> set[str]:
    return {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}


def _card_and_changed(tmp_path, name: str, **kw):
    torch.set_num_threads(1)
    model = make_model(name)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    u = np.random.default_rng(0).normal(size=model.config.hidden_size)
    rec = steer(model, u, progress=False, **kw)
    changed = _changed(before, model)
    card = (save_steered(model, tmp_path / name) / "README.md").read_text()
    return rec, changed, card


def test_kl_edit_as_a_bias_card_names_the_bias_and_alpha_times_residual_norm(tmp_path) -> None:
    rec, changed, card = _card_and_changed(tmp_path, "gpt2", layer=1, positions="all")
    (edited,) = changed
    assert edited.endswith("mlp.c_proj.bias")  # independent: the parameter whose values moved
    named = rec.edits[0].bias_module
    assert edited.endswith(named) and f"b' = b + γ u (the bias of the MLP output, `{named}`)" in card
    assert "W_O' = W_O + γ u (wᵀV⁺)" not in card  # not the paper's attention edit
    delta = float(torch.linalg.vector_norm(rec.edits[0].bias_delta))
    assert f"{rec.details.alpha:.4g} × residual norm (layer 1: γ = {delta:.4g})" in card
    assert f"KL on the probe continuations stays within the KL budget of {DEFAULT_MAX_KL}" in card  # which KL the budget bounds
    assert "KL on held-out sentences (a check, not bounded)" in card
    assert f"the one the budget {DEFAULT_MAX_KL:g} bounds" in rec.summary() and "(a check, not bounded)" in rec.summary()


def test_kl_edit_as_a_weight_card_names_the_weight(tmp_path) -> None:
    rec, changed, card = _card_and_changed(tmp_path, "gpt2", layer=1)
    (edited,) = changed
    assert edited.endswith("mlp.c_proj.weight")
    assert edited.endswith(rec.edits[0].module)
    assert f"W' = W + γ u aᵀ (the MLP output, `{rec.edits[0].module}`)" in card and "a·z ≈ 1" in card


def test_paper_edit_card_shows_the_attention_formula_and_gamma(tmp_path) -> None:
    rec, changed, card = _card_and_changed(tmp_path, "bert", strength=0.5)
    assert all("attention.output.dense" in n for n in changed), changed
    assert "W_O' = W_O + γ u (wᵀV⁺)  ⇒  F' = F + γ u wᵀ" in card
    assert f"γ = {rec.gain:.6g} = {rec.details.strength:.4g} × abs(λ1)" in card
