"""A method as a new user writes it, in one file: no options (no config class), no direction source,
and a plan that returns one plain low-rank :class:`Edit` with every optional field at its default
(``kind`` included). The lifecycle takes it through the API, the CLI (``--method``), the record and
its summary, save, reload and ``unsteer``, bit for bit."""

from __future__ import annotations

import json

import torch

import steerformer as sf
from steerformer.steering import Edit, load_model, save_steered, steering_of, unsteer
from steerformer.steering.common import tensor_sha256
from steerformer.steering.export import edit_formula
from steerformer.steering.lifecycle import Plan
from steerformer.steering.methods import Method, register_method
from tests.conftest import run_cli
from tests.models import make_model

RANK = 2


def factors(d_out: int, d_in: int) -> tuple[torch.Tensor, torch.Tensor]:
    """U (d_out, k) and A (k, d_in), fixed by a seed: the edit is W' = W + U A."""
    g = torch.Generator().manual_seed(11)
    return (0.1 * torch.randn(d_out, RANK, generator=g, dtype=torch.float64),
            0.1 * torch.randn(RANK, d_in, generator=g, dtype=torch.float64))


@register_method("plain-low-rank")
class PlainLowRank(Method):
    """W' = W + U A on the attention output of the call's layer (default the last)."""

    def plan(self, call, cfg) -> Plan:
        layer = call.config.edit_layer % call.adapter.n_layers
        slot = call.adapter.layer_sequence()[layer]
        attn = next(w for w in call.adapter.block_writers(slot) if w.kind == "attention")
        shape = call.model.base_model.get_parameter(attn.weight).shape
        d_out, d_in = (shape[1], shape[0]) if attn.transposed else (shape[0], shape[1])
        U, A = factors(d_out, d_in)
        return Plan(edits=[Edit(module=attn.weight, layer=layer, slot=slot, u=U, a=A, gain=1.0,
                                transposed=attn.transposed)])


def _hashes(model) -> dict:
    return {k: tensor_sha256(v) for k, v in model.state_dict().items()}


def test_a_plain_low_rank_edit_changes_the_weight_by_u_a_and_records() -> None:
    model = make_model("gpt2")  # float64: the stored change is U A to rounding
    W = model.transformer.h[1].attn.c_proj.weight.detach().clone()  # Conv1D: stored (in, out)
    before = _hashes(model)
    rec = sf.steer(model, method="plain-low-rank", layer=1)
    U, A = factors(W.shape[1], W.shape[0])
    delta = model.transformer.h[1].attn.c_proj.weight.detach() - W
    torch.testing.assert_close(delta, (U @ A).T, rtol=0, atol=1e-12)  # the closed form, independently
    assert rec.method == "plain-low-rank" and rec.direction_source == {} and rec.edits[0].kind == "steer"
    assert rec.details is None  # a method without details adds nothing to the core
    assert rec.config["method"] == "plain-low-rank" and rec.config["layer"] == 1
    text = rec.summary()
    assert "plain-low-rank" in text and "layer(s) [1]" in text
    unsteer(model)
    assert _hashes(model) == before


def test_a_plain_edit_through_the_cli_saves_reloads_and_unsteers_bit_for_bit(tiny_checkpoint, tmp_path) -> None:
    original = load_model(tiny_checkpoint, auto_class="AutoModelForCausalLM")
    before = _hashes(original)
    res = run_cli(["steer", tiny_checkpoint, "--method", "plain-low-rank", "--layer", "0", "--out", tmp_path / "cli",
                   "--record", tmp_path / "rec.json"])
    assert res.exit_code == 0, res.output
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["method"] == "plain-low-rank" and rec["edits"][0]["kind"] == "steer"
    back = load_model(tmp_path / "cli", auto_class="AutoModelForCausalLM")
    assert steering_of(back).records[0].method == "plain-low-rank"
    W0 = original.transformer.h[0].attn.c_proj.weight.detach().to(torch.float64)
    U, A = factors(W0.shape[1], W0.shape[0])
    expected = (W0 + (U @ A).T).to(original.dtype)  # the float64 edit cast to the stored dtype once
    assert torch.equal(back.transformer.h[0].attn.c_proj.weight.detach(), expected)
    unsteer(back)
    assert _hashes(back) == before
    res = run_cli(["unsteer", tmp_path / "cli", "--out", tmp_path / "restored"])
    assert res.exit_code == 0, res.output
    assert _hashes(load_model(tmp_path / "restored", auto_class="AutoModelForCausalLM")) == before


def test_a_plain_edit_in_python_saves_reloads_and_unsteers_bit_for_bit(tmp_path) -> None:
    model = make_model("gpt2", dtype=torch.float32)
    before = _hashes(model)
    rec = sf.steer(model, method="plain-low-rank", report=False)
    steered = _hashes(model)
    assert steered != before and "W' = W + γ" in edit_formula(rec)
    save_steered(model, tmp_path / "steered")
    assert (tmp_path / "steered" / "README.md").is_file()  # the model card, in the generic words
    back = load_model(tmp_path / "steered", auto_class="AutoModelForCausalLM")
    assert _hashes(back) == steered and steering_of(back).records[0].summary() == rec.summary()
    unsteer(back)
    assert _hashes(back) == before
