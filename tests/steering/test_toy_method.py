"""A steering method from outside the package is one class and one ``register_method`` call: the toy
method below (adds a fixed multiple of u to one MLP output bias) runs through ``sf.steer``, the CLI,
the record, ``save_steered``, ``load_model`` and ``unsteer`` like the built-in methods."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import steerformer as sf
from steerformer.configs import Config, option
from steerformer.errors import SteerformerError, bad_argument
from steerformer.steering import Edit, load_model, save_steered, steering_of, unsteer
from steerformer.steering.common import tensor_sha256
from steerformer.steering.lifecycle import Plan
from steerformer.steering.methods import Method, get_method, method_names, register_method
from steerformer.steering.sources import resolve_direction
from tests.conftest import random_vector, run_cli
from tests.models import make_model


@dataclasses.dataclass
class ToyConfig(Config):
    """The toy's one option."""

    coeff: float = option(2.0, "The multiple of u added to the MLP output bias.")

    def __post_init__(self) -> None:
        if isinstance(self.coeff, bool) or not isinstance(self.coeff, (int, float)) or self.coeff == 0:
            raise bad_argument("coeff", self.coeff, "a non-zero number")


class Toy(Method):
    """b' = b + coeff·u on the MLP output of the call's layer (default the last)."""

    config = ToyConfig

    def plan(self, call, cfg) -> Plan:
        layer = call.config.edit_layer % call.adapter.n_layers
        slot = call.adapter.layer_sequence()[layer]
        mlp = next(w for w in call.adapter.block_writers(slot) if w.kind == "mlp")
        u, source = resolve_direction(call.model, call.source, layer, direction=call.direction,
                                      tokenizer=call.tokenizer)
        width = call.model.base_model.get_parameter(mlp.weight).shape[0 if mlp.transposed else 1]
        edit = Edit(module=mlp.weight, layer=layer, slot=slot, u=u, a=torch.zeros(width, dtype=torch.float64),
                    gain=0.0, kind="add", writer="mlp", transposed=mlp.transposed, bias_module=mlp.bias_name,
                    bias_delta=cfg.coeff * u, solve={"method": "bias", "exact": True})
        return Plan(edits=[edit], direction_source=source.to_dict(), message=f"toy: b += {cfg.coeff:g} u",
                    heldout_layer=layer)


register_method("toy", Toy)  # the one call


def _hashes(model) -> dict:
    return {k: tensor_sha256(v) for k, v in model.state_dict().items()}


def test_the_toy_is_registered_by_one_call() -> None:
    assert "toy" in method_names() and {"paper", "addition", "ablation"} <= set(method_names())
    assert isinstance(get_method("toy"), Toy)
    with pytest.raises(SteerformerError, match="method='nope'"):
        get_method("nope")
    with pytest.raises(SteerformerError, match="not taken"):
        register_method("paper", Toy)


def test_toy_steers_as_a_hook_adding_coeff_u_after_the_mlp_would() -> None:
    model = make_model("gpt2", dtype=torch.float32)
    u = random_vector(64, seed=5)
    ids = torch.tensor([[3, 9, 4, 7, 1]])
    mlp = model.transformer.h[1].mlp
    unit = (u / u.norm()).to(torch.float32)
    handle = mlp.register_forward_hook(lambda m, a, out: out + 0.5 * unit)  # the independent computation
    with torch.no_grad():
        expected = model(ids).logits
    handle.remove()
    rec = sf.steer(model, u, method="toy", coeff=0.5, layer=1)
    with torch.no_grad():
        got = model(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert rec.method == "toy" and rec.config["coeff"] == 0.5 and rec.message == "toy: b += 0.5 u"
    assert rec.kl is not None and rec.kl > 0  # the lifecycle measured it on the held-out prompts


def test_toy_options_are_checked_by_its_config_and_unknown_ones_refused() -> None:
    model = make_model("gpt2")
    with pytest.raises(SteerformerError, match="coeff=0"):
        sf.steer(model, random_vector(64), method="toy", coeff=0)
    with pytest.raises(TypeError, match="'cofef'"):
        sf.steer(model, random_vector(64), method="toy", cofef=1.0)
    with pytest.raises(SteerformerError, match="max_kl"):  # another method's option
        sf.steer(model, random_vector(64), method="toy", max_kl=0.1)


def test_toy_through_the_cli_record_save_reload_and_unsteer(tiny_checkpoint, tmp_path) -> None:
    original = load_model(tiny_checkpoint, auto_class="AutoModelForCausalLM")
    before = _hashes(original)
    res = run_cli(["steer", tiny_checkpoint, "--method", "toy", "--direction", tiny_checkpoint.parent / "u.npy",
                   "--layer", "0", "--out", tmp_path / "cli", "--record", tmp_path / "rec.json"])
    assert res.exit_code == 0, res.output
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["method"] == "toy" and rec["config"]["method"] == "toy" and rec["message"] == "toy: b += 2 u"
    back = load_model(tmp_path / "cli", auto_class="AutoModelForCausalLM")
    bias = back.transformer.h[0].mlp.c_proj.bias.detach()
    u = np.ones(64) / np.sqrt(64)
    np.testing.assert_allclose(bias.numpy(), original.transformer.h[0].mlp.c_proj.bias.detach().numpy() + 2 * u,
                               rtol=0, atol=1e-6)
    unsteer(back)
    assert _hashes(back) == before  # bit for bit
    res = run_cli(["unsteer", tmp_path / "cli", "--out", tmp_path / "restored"])
    assert res.exit_code == 0, res.output
    assert _hashes(load_model(tmp_path / "restored", auto_class="AutoModelForCausalLM")) == before


def test_toy_in_python_saves_reloads_and_unsteers_bit_for_bit(tmp_path) -> None:
    model = make_model("gpt2", dtype=torch.float32)
    before = _hashes(model)
    sf.steer(model, random_vector(64, seed=3), method="toy", report=False)
    steered = _hashes(model)
    assert steered != before
    save_steered(model, tmp_path / "steered")
    back = load_model(tmp_path / "steered", auto_class="AutoModelForCausalLM")
    assert _hashes(back) == steered and steering_of(back).records[0].method == "toy"
    unsteer(back)
    assert _hashes(back) == before


def test_cli_unknown_method_is_refused_before_loading(tmp_path) -> None:
    res = run_cli(["steer", tmp_path / "no-such-model", "--method", "nope"])
    assert res.exit_code == 2 and "--method" in res.output


def test_a_method_config_names_its_method() -> None:
    from steerformer.steering.methods.paper.config import PaperConfig

    rec = sf.steer(make_model("gpt2"), random_vector(64, seed=6), ToyConfig(coeff=0.25), layer=1, report=False)
    assert rec.method == "toy" and rec.config["coeff"] == 0.25
    a = sf.steer(make_model("gpt2"), random_vector(64, seed=6), PaperConfig(gain=0.5, solve="exact"), layer=0,
                 report=False)
    b = sf.steer(make_model("gpt2"), random_vector(64, seed=6), gain=0.5, solve="exact", layer=0, report=False)
    assert a.method == b.method == "paper" and a.gain == b.gain == 0.5
    assert torch.equal(a.edits[0].a, b.edits[0].a)
