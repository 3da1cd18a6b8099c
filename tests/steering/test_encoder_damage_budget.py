"""The default steer of an encoder (the paper's edit, its gain searched for a target alignment)
has a damage budget, as max_kl bounds a causal LM's: the final states keep a mean cosine >=
min_state_cosine (default 0.9) with the base model's. A target out of reach stops at the largest gain
inside the budget and says so — never an edit that wrecks the model. Checked with the model's own
forward pass, edit on and off."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steerformer.steering.methods.paper.config import DEFAULT_MIN_STATE_COSINE
from steerformer.steering import steer, unsteer
from tests.models import make_model

PROMPTS = torch.randint(5, 101, (6, 10), generator=torch.Generator().manual_seed(3))


def _final(model) -> torch.Tensor:
    with torch.no_grad():
        return model(PROMPTS).last_hidden_state.to(torch.float64)


def _mean_cos(a, b) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())


def test_an_unreachable_target_stops_inside_the_damage_budget_and_says_so() -> None:
    torch.set_num_threads(1)
    model = make_model("bert")
    base = _final(model)
    u = np.random.default_rng(1).normal(size=model.config.hidden_size)
    rec = steer(model, u, prompts=PROMPTS, heldout_prompts=PROMPTS, progress=False)
    assert rec.edits[0].solve["method"] != "ablate" and rec.edits[0].kind == "steer"
    cos = _mean_cos(_final(model), base)
    assert cos >= DEFAULT_MIN_STATE_COSINE - 1e-6  # the real forward pass keeps the budget
    assert rec.details.target_reached is False and "out of reach within the damage budget" in rec.message
    assert f">= {DEFAULT_MIN_STATE_COSINE:g}" in rec.message
    assert rec.state_cosine == pytest.approx(cos, abs=1e-6)  # held-out = these prompts here
    # the budget is used up: 5 % more gain leaves it
    gain = rec.gain
    unsteer(model)
    steer(model, u, gain=1.05 * gain, prompts=PROMPTS, heldout_prompts=PROMPTS, progress=False)
    assert _mean_cos(_final(model), base) < DEFAULT_MIN_STATE_COSINE
    unsteer(model)
    # without the budget the same search goes far beyond it (the bug: an edit many times the weight)
    free = steer(model, u, prompts=PROMPTS, heldout_prompts=PROMPTS, min_state_cosine=0, progress=False)
    assert free.gain > gain and _mean_cos(_final(model), base) < DEFAULT_MIN_STATE_COSINE


def test_a_target_reachable_within_the_budget_is_reached_as_before() -> None:
    model = make_model("bert")
    base = _final(model)
    u = np.random.default_rng(1).normal(size=model.config.hidden_size)
    # this model's alignment goes 0.083 -> 0.127 inside the budget: 0.1 is reachable there
    rec = steer(model, u, target_alignment=0.1, prompts=PROMPTS, heldout_prompts=PROMPTS, progress=False)
    assert rec.details.target_reached and "reached at gain" in rec.message and "damage budget" not in rec.message
    assert _mean_cos(_final(model), base) >= DEFAULT_MIN_STATE_COSINE
