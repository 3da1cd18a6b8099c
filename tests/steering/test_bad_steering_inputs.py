"""Steering inputs that used to end in a traceback or a false report are one clear line: a
fractional layer, a missing prompts file, a layer whose weights are all zero, and ``unsteer --last``
asking for more calls than the chain holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from steerformer.errors import InvalidArgumentError
from steerformer.steering import load_for_steering, save_steered, steer, unsteer, unsteer_checkpoint

from tests.conftest import run_cli
from tests.models import make_model


@pytest.fixture(scope="module")
def steered_once(tmp_path_factory) -> Path:
    model = make_model("gpt2", dtype=torch.float32)
    steer(model, torch.ones(64, dtype=torch.float64), gain=0.5, solve="exact", report=False)
    return save_steered(model, tmp_path_factory.mktemp("s") / "steered")


# ---- unsteer --last K with K above the chain ---------------------------------------------------
def test_unsteer_last_more_than_the_chain_is_refused_not_reported(steered_once, tmp_path) -> None:
    res = run_cli(["unsteer", steered_once, "--out", tmp_path / "out", "--last", "99"])
    assert res.exit_code == 2 and "removed the last" not in res.output, res.output
    assert "--last=99 is invalid: expected a whole number from 1 to 1 (the chain holds 1 steering call)" in res.output
    assert not (tmp_path / "out").exists()
    res = run_cli(["unsteer", steered_once, "--out", tmp_path / "out", "--last", "1"])
    assert res.exit_code == 0 and "removed the last 1 steering call" in res.output, res.output


def test_unsteer_last_in_the_library(steered_once) -> None:
    model = load_for_steering(steered_once)
    with pytest.raises(InvalidArgumentError, match="last=2 is invalid: expected a whole number from 1 to 1"):
        unsteer(model, last=2)
    with pytest.raises(InvalidArgumentError, match="last=99"):
        unsteer_checkpoint(steered_once, steered_once.parent / "out", last=99)
    assert not (steered_once.parent / "out").exists()


# ---- layer=0.5 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [0.5, "1", True], ids=["float", "string", "bool"])
def test_a_layer_that_is_not_a_whole_number_is_one_line(layer) -> None:
    model = make_model("gpt2")
    with pytest.raises(InvalidArgumentError, match=f"layer={layer!r} is invalid: expected a whole number"):
        steer(model, torch.ones(64, dtype=torch.float64), layer=layer, gain=1.0)
    rec = steer(model, torch.ones(64, dtype=torch.float64), layer=np.int64(0), gain=1.0, report=False)
    assert rec.layer == 0  # a NumPy integer is a whole number


@pytest.mark.parametrize("layers", [True, [True], [1, False]], ids=["bool", "list-of-bool", "bool-in-list"])
def test_a_bool_is_no_layer_in_any_layer_selection(layers) -> None:
    """``layers=True`` was layer 1 (a bool is an int to Python): the one layer-selection check
    (``configs.select_layers``) refuses it wherever layers are chosen."""
    from steerformer import activation_steering

    model = make_model("gpt2")
    with pytest.raises(InvalidArgumentError, match=r"layers=.* is invalid: expected layer indices \(whole numbers"):
        with activation_steering(model, np.ones(64), layers=layers):
            pass


# ---- --positive missing.txt ----------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--positive", "--negative", "--pairs"])
def test_a_missing_prompts_file_is_refused_before_loading(tiny_checkpoint, tmp_path, flag) -> None:
    (tmp_path / "p.txt").write_text("a good day\n")
    files = {"--positive": tmp_path / "p.txt", "--negative": tmp_path / "p.txt"}
    files.pop(flag, None)
    args = ["steer", tiny_checkpoint, flag, tmp_path / "missing.txt", "--gain", "1"]
    for f, p in files.items():
        if flag != "--pairs":
            args += [f, p]
    res = run_cli(args)
    assert res.exit_code == 2 and f"{flag}=" in res.output and "missing.txt" in res.output, res.output
    assert "an existing file (not found)" in res.output and "Loading weights" not in res.output


def test_a_missing_prompts_file_in_the_library(tiny_checkpoint, tmp_path) -> None:
    from steerformer.steering import contrastive_direction

    model = load_for_steering(tiny_checkpoint)
    for missing in (tmp_path / "missing.txt", str(tmp_path / "missing.txt"), tmp_path):
        with pytest.raises(InvalidArgumentError, match="positive=.* is invalid: expected a list of prompts or an "
                                                       "existing text file"):
            contrastive_direction(model, missing, ["a b c"], tokenizer=object())


# ---- all-zero weights ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zeros(tmp_path_factory, tiny_checkpoint) -> Path:
    import shutil

    d = tmp_path_factory.mktemp("z") / "zeros"
    shutil.copytree(tiny_checkpoint, d)
    tensors = load_file(str(d / "model.safetensors"))
    save_file({k: torch.zeros_like(v) for k, v in tensors.items()}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    return d


@pytest.mark.parametrize("how", [
    ["--gain", "1"], ["--gain", "1", "--solve", "exact"], ["--strength", "1"], ["--eigvec", "0", "--gain", "1"],
    ["--gain", "1", "--solve", "exact", "--lazy", "--out", "OUT"],
], ids=["min-norm", "exact", "strength", "eigvec", "lazy"])
def test_all_zero_weights_are_one_line(tiny_checkpoint, zeros, tmp_path, how) -> None:
    how = [str(tmp_path / "out") if a == "OUT" else a for a in how]
    direction = [] if "--eigvec" in how else ["--direction", tiny_checkpoint.parent / "u.npy"]
    res = run_cli(["steer", zeros, *direction, *how])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: --layer=1 is invalid") and "all-zero value map" in last, res.output
    assert not (tmp_path / "out").exists()


def test_the_top_of_an_all_zero_spectrum_is_zero() -> None:
    """ARPACK cannot start on a matrix that maps its start vector to 0; the full eig answers."""
    from steerformer.steering.methods.paper.algebra import top_eigenvalues

    np.testing.assert_array_equal(top_eigenvalues(torch.zeros(64, 64), 4), np.zeros(4, dtype=complex))


# ---- a zero output matrix with a strength ----------------------------------------------------------
def test_a_strength_on_a_zero_output_matrix_is_refused_not_made_with_gain_zero(tiny_checkpoint, tmp_path) -> None:
    """gain = strength·|λ1(W_O V)|: with W_O = 0 every strength is gain 0; the edit used to be "made"."""
    import shutil

    d = tmp_path / "zero_o"
    shutil.copytree(tiny_checkpoint, d)
    tensors = load_file(str(d / "model.safetensors"))
    key = next(k for k in tensors if k.endswith("h.1.attn.c_proj.weight"))
    tensors[key] = torch.zeros_like(tensors[key])
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out"
    res = run_cli(["steer", d, "--layer", "1", "--direction", tiny_checkpoint.parent / "u.npy",
                   "--strength", "2", "--out", out])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: --strength=2.0 is invalid") and "output matrix is all zero" in last, res.output
    assert "--gain" in last and not out.exists()
    # the gain itself still edits the layer (γ u aᵀ added to a zero matrix is not zero)
    model = load_for_steering(d)
    steer(model, layer=1, direction=torch.ones(64), gain=1.0)
    assert float(model.transformer.h[1].attn.c_proj.weight.detach().abs().max()) > 0


@pytest.mark.parametrize("cmd,expect", [
    (["analyze", "IN", "--out", "OUT"], "error: cumulative=True is invalid: expected layer matrices whose product is not all zero"),
    (["steer", "IN", "--direction", "U", "--max-kl", "0.1", "--out", "OUT"], "error: --layers=1 is invalid: expected layers whose "
                                                                             "h.1.mlp.c_proj receives non-zero states"),
    (["collapse", "IN", "--out", "OUT", "--passes", "2", "--n-prompts", "3", "--length", "8"],
     "error: MODEL='zeros' is invalid: expected a model whose embedded prompts are not all zero"),
], ids=["analyze", "kl-steer", "collapse"])
def test_an_all_zero_model_is_one_line_in_analyze_the_kl_steer_and_collapse(tiny_checkpoint, zeros, tmp_path, cmd,
                                                                             expect) -> None:
    out = tmp_path / "out"
    subs = {"IN": str(zeros), "OUT": str(out), "U": str(tiny_checkpoint.parent / "u.npy")}
    res = run_cli([subs.get(a, a) for a in cmd])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(expect.replace("IN", repr(str(zeros)))), res.output
    assert not out.exists()
