"""Edits as values (issue 11.1): the Edit / Steering API, stacked edits in any order and layer,
partial and full bit-exact undo, and the rank-k factors against weights re-read from the model."""

from __future__ import annotations

import copy

import pytest
import torch

from steerformer.adapters import get_adapter
from steerformer.steering import Edit, Steering, steer, steering_of, unsteer

from .tiny_models import make_model


def _unit(d: int, seed: int) -> torch.Tensor:
    v = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return v / v.norm()


def _params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family,dtype", [("gpt2", torch.float32), ("bert", torch.float64), ("gpt_neo", torch.float32)])
def test_stacked_edits_any_layer_any_order_undo_last_k_and_all(family: str, dtype) -> None:
    model = make_model(family, dtype=dtype)
    d = get_adapter(model.config).d_model
    states = [_params(model)]
    # layer 1, layer 0, layer 1 again (two edits of one module), different gains
    plan = [(1, 3.0, 1), (0, 1.5, 2), (1, 2.0, 3)]
    recs = []
    for layer, gain, seed in plan:
        recs.append(steer(model, _unit(d, seed), left=_unit(d, seed + 10), layer=layer, gain=gain, solve="exact",
                          report=False))
        states.append(_params(model))
    steering = steering_of(model)
    assert isinstance(steering, Steering)
    assert [r.edit.layer for r in steering.records] == [1, 0, 1]
    assert len(steering.edits) == 3 and steering.modules() == [recs[0].module, recs[1].module]
    # The edit's values: γ, u, a as recorded; w_eff = Vᵀaᵀ equals w for an exact solve.
    e = recs[0].edit
    assert e.gain == 3.0 and torch.allclose(e.w_eff, e.w, atol=1e-9)
    # rank-2 factors of the twice-edited module: B @ A = the float64 sum of the two deltas, and the
    # stored weights moved by it (to the rounding of the stored dtype).
    B, A = steering.factors(recs[0].module)
    assert B.shape == (d, 2) and A.shape[0] == 2
    expect = 3.0 * torch.outer(_unit(d, 1), e.a) + 2.0 * torch.outer(_unit(d, 3), recs[2].edit.a)
    assert torch.allclose(B @ A, expect, rtol=0, atol=1e-12)
    name = recs[0].module
    moved = (states[3][f"{_prefix(model)}{name}"].double() - states[0][f"{_prefix(model)}{name}"].double())
    moved = moved.T if e.transposed else moved
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert (moved - B @ A).abs().max() <= tol * (1 + states[0][f"{_prefix(model)}{name}"].abs().max())
    # Undo the last one, then the last two: bit-exact intermediate states.
    unsteer(model, last=1)
    assert _same(_params(model), states[2]) and len(steering_of(model).records) == 2
    unsteer(model, last=1)
    assert _same(_params(model), states[1])
    steer(model, _unit(d, 5), layer=0, gain=0.7, solve="exact", report=False)
    unsteer(model)
    assert _same(_params(model), states[0]) and steering_of(model) is None


def _prefix(model) -> str:
    base = model.base_model
    return "" if base is model else f"{model.base_model_prefix}."


def test_edit_round_trips_and_replays_bit_exactly_on_a_fresh_model() -> None:
    model = make_model("gpt2", dtype=torch.float32)
    fresh = copy.deepcopy(model)
    original = _params(model)
    rec = steer(model, _unit(64, 1), gain=2.0, solve="exact", report=False)
    edit = Edit.from_dict(rec.edit.to_dict())
    assert edit == rec.edit and not edit.is_applied
    edit.apply(fresh)  # checks before_sha256 and after_sha256 against the replayed bytes
    assert _same(_params(fresh), _params(model))
    edit.remove(fresh)
    assert _same(_params(fresh), original)
    # An edit applied to weights it was not made for is refused, nothing changed.
    other = make_model("gpt2", seed=3, dtype=torch.float32)
    before = _params(other)
    with pytest.raises(Exception, match="before_sha256"):
        edit.apply(other)
    assert _same(_params(other), before)


def test_deepcopy_carries_the_steering_with_the_weights() -> None:
    model = make_model("bert", dtype=torch.float32)
    original = _params(model)
    steer(model, _unit(64, 1), gain=2.0, solve="exact", report=False)
    twin = copy.deepcopy(model)
    unsteer(twin)
    assert _same(_params(twin), original)


def test_unsteer_last_is_checked() -> None:
    model = make_model("bert", dtype=torch.float32)
    steer(model, _unit(64, 1), gain=2.0, solve="exact", report=False)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(Exception, match="last="):
            unsteer(model, last=bad)
