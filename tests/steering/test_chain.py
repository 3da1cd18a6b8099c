"""Edits as values: the Edit / Steering API, stacked edits in any order and layer,
partial and full bit-exact undo, and the rank-k factors against weights re-read from the model."""

from __future__ import annotations

import copy

import pytest
import torch

from steerformer.adapters import get_adapter
from steerformer.steering import Edit, Steering, steer, steering_of, unsteer

from tests.conftest import unit_vector
from tests.models import make_model


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
        recs.append(steer(model, unit_vector(d, seed), left=unit_vector(d, seed + 10), layer=layer, gain=gain, solve="exact",
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
    expect = 3.0 * torch.outer(unit_vector(d, 1), e.a) + 2.0 * torch.outer(unit_vector(d, 3), recs[2].edit.a)
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
    steer(model, unit_vector(d, 5), layer=0, gain=0.7, solve="exact", report=False)
    unsteer(model)
    assert _same(_params(model), states[0]) and steering_of(model) is None


def _prefix(model) -> str:
    base = model.base_model
    return "" if base is model else f"{model.base_model_prefix}."


def test_edit_round_trips_and_replays_bit_exactly_on_a_fresh_model() -> None:
    model = make_model("gpt2", dtype=torch.float32)
    fresh = copy.deepcopy(model)
    original = _params(model)
    rec = steer(model, unit_vector(64, 1), gain=2.0, solve="exact", report=False)
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
    steer(model, unit_vector(64, 1), gain=2.0, solve="exact", report=False)
    twin = copy.deepcopy(model)
    unsteer(twin)
    assert _same(_params(twin), original)


def test_unsteer_last_is_checked() -> None:
    model = make_model("bert", dtype=torch.float32)
    steer(model, unit_vector(64, 1), gain=2.0, solve="exact", report=False)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(Exception, match="last="):
            unsteer(model, last=bad)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_bias_shift_is_reported_and_compensated_through_b_O(family: str) -> None:
    """Feeding the concatenated value bias b_V through the real output module (weight and bias):
    the edit adds γ (a·b_V) u to it — record.details.bias_shift_norm — unless compensate_bias removes it."""
    model = make_model(family, dtype=torch.float64)
    adapter = get_adapter(model.config)
    slot = adapter.layer_sequence()[-1]
    name = adapter.output_weight_name(slot)
    out_module = model.base_model.get_submodule(name.rsplit(".", 1)[0])
    if family == "bert":
        b_V = model.base_model.encoder.layer[1].attention.self.value.bias.detach().clone()
    else:
        b_V = model.base_model.h[1].attn.c_attn.bias.detach()[128:192].clone()
    original = _params(model)
    with torch.no_grad():
        y0 = out_module(b_V[None])[0].clone()
    u, w = unit_vector(64, 1), unit_vector(64, 2)
    rec = steer(model, u, left=w, gain=3.0, solve="exact", report=False)
    with torch.no_grad():
        shift = out_module(b_V[None])[0] - y0
    expect = 3.0 * float(rec.edit.a @ b_V) * u
    assert torch.allclose(shift, expect, atol=1e-10) and abs(rec.details.bias_shift_norm - expect.norm()) < 1e-10
    assert rec.details.bias_shift_norm > 1e-3 and "bias shift" in rec.summary()
    unsteer(model)
    rec = steer(model, u, left=w, gain=3.0, solve="exact", report=False, compensate_bias=True)
    with torch.no_grad():
        shift = out_module(b_V[None])[0] - y0
    assert shift.abs().max() < 1e-10 and rec.details.compensate_bias and "compensated" in rec.summary()
    # an exact solve applies w itself (w_eff = w); undo restores b_O exactly
    assert rec.details.w_eff_cos > 1 - 1e-9
    unsteer(model)
    assert _same(_params(model), original)


def test_compensated_chain_saves_verifies_and_unsteers_from_disk(tmp_path) -> None:
    from steerformer.steering import save_steered, unsteer_checkpoint, verify_checkpoint
    from transformers import BertModel

    model = make_model("bert", dtype=torch.float32)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    steer(model, unit_vector(64, 1), gain=2.0, solve="exact", report=False, compensate_bias=True)
    steer(model, unit_vector(64, 2), gain=1.0, solve="exact", report=False, compensate_bias=True)
    out = save_steered(model, tmp_path / "s")
    assert verify_checkpoint(out)["ok"]
    back = BertModel.from_pretrained(unsteer_checkpoint(out, tmp_path / "o")).state_dict()
    assert all(torch.equal(original[k], back[k]) for k in original)


def test_compensate_bias_needs_biases() -> None:
    model = make_model("gpt_neo")  # GPT-Neo's q/k/v projections have no bias
    with pytest.raises(Exception, match="compensate_bias"):
        steer(model, unit_vector(64, 1), gain=1.0, solve="exact", report=False, compensate_bias=True)


def test_steered_context_manager_always_removes_its_edit() -> None:
    import steerformer as sf

    model = make_model("gpt2", dtype=torch.float32)
    original = _params(model)
    with sf.steered(model, unit_vector(64, 1), gain=2.0, solve="exact", report=False) as rec:
        assert rec.edit.layer == 1 and not _same(_params(model), original)
    assert _same(_params(model), original) and steering_of(model) is None
    # an earlier edit stays; an exception inside the block still removes the block's edits
    steer(model, unit_vector(64, 2), gain=1.0, solve="exact", layer=0, report=False)
    once = _params(model)
    with pytest.raises(RuntimeError, match="boom"):
        with sf.steered(model, unit_vector(64, 1), gain=2.0, solve="exact", report=False):
            steer(model, unit_vector(64, 3), gain=1.0, solve="exact", report=False)  # made inside: removed too
            raise RuntimeError("boom")
    assert _same(_params(model), once) and len(steering_of(model).records) == 1


def test_offloaded_layer_is_a_clear_error_naming_it(tmp_path) -> None:
    """device_map with disk offload leaves the layer's weights on the meta device; today's code
    crashed with 'Tensor.item() cannot be called on meta tensors'."""
    from transformers import BertModel

    make_model("bert", dtype=torch.float32).save_pretrained(tmp_path / "b")
    device_map = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "pooler": "cpu"}
    model = BertModel.from_pretrained(tmp_path / "b", device_map=device_map, offload_folder=str(tmp_path / "off"),
                                      attn_implementation="eager")
    with pytest.raises(Exception, match=r"layer 1: weight encoder\.layer\.1\..* is offloaded") as exc:
        steer(model, unit_vector(64, 1), gain=1.0, solve="exact", report=False)
    assert "meta tensors" not in str(exc.value) and steering_of(model) is None
    steer(model, unit_vector(64, 1), layer=0, gain=1.0, solve="exact", report=False)  # a layer held in memory: fine
    assert steering_of(model).records[0].edit.layer == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_edit_is_float64_then_cast_once(dtype) -> None:
    model = make_model("gpt2", dtype=dtype)
    W0 = model.transformer.h[1].attn.c_proj.weight.detach().clone()
    u, w = unit_vector(64, 1), unit_vector(64, 2)
    rec = steer(model, u, left=w, gain=2.0, solve="exact", report=False)
    expect = (W0.double() + (2.0 * torch.outer(u, rec.edit.a)).T).to(dtype)  # Conv1D stores W_Oᵀ
    assert torch.equal(model.transformer.h[1].attn.c_proj.weight.detach(), expect)
    assert rec.edit.dtype == str(dtype).replace("torch.", "") and rec.edit.device == "cpu"
    unsteer(model)
    assert torch.equal(model.transformer.h[1].attn.c_proj.weight.detach(), W0)


def test_cli_steer_device_dtype_quiet_and_progress(tmp_path) -> None:
    import numpy as np
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    make_model("bert", dtype=torch.float32).save_pretrained(tmp_path / "b")
    np.save(tmp_path / "u.npy", unit_vector(64, 1).numpy())
    r = CliRunner()
    common = ["steer", str(tmp_path / "b"), "--direction", str(tmp_path / "u.npy"), "--solve", "exact",
              "--measure", "dynamics", "--target-alignment", "0.5"]
    res = r.invoke(app, common + ["--device", "cpu", "--dtype", "bf16", "--record", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    import json

    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["dtype"] == "bfloat16" and rec["edits"][0]["dtype"] == "bfloat16"
    assert "gain search" in res.output  # tqdm on stderr (CliRunner mixes the streams)
    res = r.invoke(app, common + ["--quiet"])
    assert res.exit_code == 0 and "gain search" not in res.output, res.output
    for flag, value in (("--device", "quantum"), ("--device", "cuda:7"), ("--dtype", "int3")):
        res = r.invoke(app, common + [flag, value])
        assert res.exit_code == 2 and flag in res.output, res.output
