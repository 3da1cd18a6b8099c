"""Activation addition at run time (a hook after a block) and as weights (a bias edit where the MLP
output projection has a bias: exact), checked against the model's own forward and each other."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steerformer.configs import DEFAULT_MAX_KL

import steerformer as sf
from steerformer.errors import SteerformerError

from ..conftest import random_vector, run_cli
from ..models import make_model


@pytest.mark.parametrize("family", ["gpt2", "gpt_neo"])
def test_hook_equals_bias_edit_where_the_writer_has_a_bias(family: str) -> None:
    model = make_model(family)
    ids = torch.randint(0, 100, (3, 9), generator=torch.Generator().manual_seed(1))
    v = random_vector(64, seed=3) * 2.5
    with torch.no_grad():
        base = model(ids).logits
        with sf.activation_steering(model, v, layers=[1], coeff=0.7):
            hooked = model(ids).logits
        with sf.addition_as_weights(model, v, layers=[1], coeff=0.7, positions="all") as edits:
            assert edits[0].solve["method"] == "bias" and edits[0].changes_bias
            edited = model(ids).logits
        after = model(ids).logits
    assert float((hooked - base).abs().max()) > 1e-3  # the addition does something
    assert torch.allclose(hooked, edited, atol=1e-5, rtol=0)
    assert torch.equal(after, base)  # both removed bit for bit


def test_hook_adds_exactly_c_v_to_the_block_output() -> None:
    model = make_model("gpt2")
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(2))
    v = random_vector(64, seed=5)
    seen = []

    def read(m, a, out):  # registered after the steering hook: sees what the next block receives
        seen.append(out[0] if isinstance(out, tuple) else out)

    with torch.no_grad():
        handle = model.transformer.h[0].register_forward_hook(read)
        model(ids)
        handle.remove()
        with sf.activation_steering(model, v, layers=0, coeff=-1.5):
            handle = model.transformer.h[0].register_forward_hook(read)
            model(ids)
            handle.remove()
    assert torch.allclose(seen[1] - seen[0], (-1.5 * v).to(seen[0].dtype).expand_as(seen[0]), atol=1e-10)


def test_skip_first_leaves_position_zero_alone_also_while_generating() -> None:
    model = make_model("gpt2")
    ids = torch.randint(1, 100, (2, 6), generator=torch.Generator().manual_seed(3))
    v = random_vector(64, seed=7) * 3
    with torch.no_grad():
        base = model(ids).logits
        with sf.activation_steering(model, v, layers=[0, 1], coeff=1.0, positions="skip-first"):
            hooked = model(ids).logits
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                                 pad_token_id=0)
            full = model(gen).logits  # the same hook in one forward over the whole sequence
    assert torch.equal(hooked[:, 0], base[:, 0])  # causal: position 0 sees only itself
    assert float((hooked[:, 1:] - base[:, 1:]).abs().max()) > 1e-3
    # cached generation saw positions 6.. (not 0): its greedy tokens are the full forward's argmax
    assert torch.equal(gen[:, 6:], full[:, 5:-1].argmax(-1))


def test_kl_calibrated_steer_keeps_the_probe_kl_within_budget_and_undoes_bit_for_bit() -> None:
    model = make_model("gpt2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rec = sf.steer(model, random_vector(64, seed=11), max_kl=0.05, layer=1)
    assert rec.details.max_kl == 0.05 and 0 < rec.kl <= 0.05
    assert rec.edits[0].kind == "add" and rec.edits[0].layer == 1
    sf.unsteer(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_kl_is_the_default_calibration_of_a_causal_lm_and_alignment_of_an_encoder() -> None:
    rec = sf.steer(make_model("gpt2"), random_vector(64, seed=1), layer=0)
    assert rec.method == "addition" and rec.details.max_kl == DEFAULT_MAX_KL == 0.5
    rec = sf.steer(make_model("gpt2"), random_vector(64, seed=1), target_alignment=0.5)  # the paper's edit
    assert rec.method == "paper" and rec.edits[0].kind == "steer" and rec.layer == 1


@pytest.mark.parametrize("kw, flag", [({"max_kl": 0}, "max_kl"), ({"max_kl": -1.0}, "max_kl"),
                                      ({"max_kl": float("nan")}, "max_kl"),
                                      ({"max_kl": 0.3, "gain": 1.0}, "gain"),
                                      ({"positions": "middle"}, "positions")])
def test_bad_budget_is_one_line_naming_the_argument(kw: dict, flag: str) -> None:
    model = make_model("gpt2")
    with pytest.raises(SteerformerError) as exc:
        sf.steer(model, random_vector(64), **kw)
    assert flag in str(exc.value) and "\n" not in str(exc.value)


def test_unreachable_budget_is_one_line_and_nothing_changes() -> None:
    model = make_model("gpt2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(SteerformerError, match="max_kl") as exc:
        sf.steer(model, random_vector(64), max_kl=1e-300, layer=0)
    assert "\n" not in str(exc.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_max_kl_on_an_encoder_is_refused() -> None:
    with pytest.raises(SteerformerError, match="max_kl.*causal"):
        sf.steer(make_model("bert"), random_vector(64), max_kl=0.3)


def test_activation_steering_bad_inputs_name_the_argument() -> None:
    model = make_model("gpt2")
    for kw, flag in (({"layers": None}, "layers"), ({"layers": [5]}, "layers"), ({"layers": [0], "coeff": "x"}, "coeff"),
                     ({"layers": [0], "positions": "last"}, "positions")):
        with pytest.raises(SteerformerError, match=flag):
            with sf.activation_steering(model, random_vector(64), **kw):
                pass
    with pytest.raises(SteerformerError, match="vector"):
        with sf.activation_steering(model, np.ones(10), layers=[0]):
            pass


@pytest.mark.parametrize("args", [["--max-kl", "0"], ["--max-kl", "-0.5"]])
def test_cli_bad_budget_exits_2(tiny_checkpoint, args: list) -> None:
    res = run_cli(["steer", tiny_checkpoint, "--direction", tiny_checkpoint.parent / "u.npy", *args])
    assert res.exit_code == 2 and "--max-kl" in res.output


@pytest.mark.parametrize("args, flag", [(["--coeffs", "a,b"], "--coeffs"), (["--questions", "0"], "--questions"),
                                        (["--layers", "7"], "--layers")])
def test_cli_evaluate_bad_input_exits_2(tiny_checkpoint, tmp_path, args: list, flag: str) -> None:
    res = run_cli(["evaluate", tiny_checkpoint, "--token", "x", "--out", tmp_path / "ev", *args])
    assert res.exit_code == 2 and flag in res.output
    assert not (tmp_path / "ev").exists()


def test_model_card_carries_the_budget_and_the_evaluation() -> None:
    from steerformer.steering.export import model_card

    model = make_model("gpt2")
    rec = sf.steer(model, random_vector(64, seed=2), max_kl=0.1, layer=1, report=False)
    rec.evaluation = {"n_answers": 8, "concept_rate": 0.625, "base_concept_rate": 0.0, "kl": 0.25, "distinct2": 0.6,
                      "fluency": 1.9}
    text = str(model_card([rec], model=model))
    assert "KL budget of 0.1 nats/token" in text and "after layer(s) [1]" in text
    assert "concept rate 0.62 (base 0.00), KL on the answers 0.250" in text


@pytest.mark.parametrize("positions", ["skip-first", "all"])  # rank-1 fitted edit / exact bias edit
def test_kl_steered_model_saves_reloads_and_unsteers(tmp_path, positions: str) -> None:
    model = make_model("gpt2", dtype=torch.float32)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    sf.steer(model, random_vector(64, seed=4), max_kl=0.1, layer=1, positions=positions, report=False)
    sf.save_steered(model, tmp_path / "steered")
    back = sf.load_for_steering(tmp_path / "steered")
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in model.state_dict().items())
    sf.unsteer(back)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in original.items())
