"""A checkpoint's config.json is checked against itself and against the weights (their shapes, from
the safetensors headers) before anything is built from it: every command refuses a config that
does not fit with one line naming the field, and writes nothing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from steerformer.errors import CheckpointError, SteerformerError
from steerformer.loading import load_model, open_source

from .broken_checkpoints import drop_tensor, edit_config, edit_header
from .models import FAMILIES, SPECS, make_model

runner = CliRunner()


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """Tiny checkpoints: GPT-2 with its LM head, BERT, Llama (4 query, 2 key/value heads)."""
    root = tmp_path_factory.mktemp("ckpts")
    make_model("gpt2", dtype=torch.float32).save_pretrained(root / "gpt2")
    make_model("bert", dtype=torch.float32).save_pretrained(root / "bert")
    make_model("llama", head=True, dtype=torch.float32).save_pretrained(root / "llama")
    return {p.name: p for p in root.iterdir()}


def _bert_config_relabelled(d: Path, saved) -> None:
    shutil.rmtree(d)
    shutil.copytree(saved["bert"], d)
    edit_config(d, model_type="gpt2")


def _header_shape_lie(d: Path, saved) -> None:  # [64, 64] stored, [32, 128] claimed: same byte count
    edit_header(d / "model.safetensors", lambda h: h["transformer.h.0.attn.c_proj.weight"].update(shape=[32, 128]))


def _bin_index_without_metadata(d: Path, saved) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    torch.save(tensors, d / "pytorch_model-00001-of-00001.bin")
    (d / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"weight_map": {k: "pytorch_model-00001-of-00001.bin" for k in tensors}}))


def _index_maps_a_tensor_to_config_json(d: Path, saved) -> None:
    from safetensors.torch import load_file

    os.rename(d / "model.safetensors", d / "model-00001-of-00001.safetensors")
    keys = load_file(str(d / "model-00001-of-00001.safetensors"))
    weight_map = {k: "model-00001-of-00001.safetensors" for k in keys}
    weight_map["transformer.h.0.attn.c_proj.weight"] = "config.json"
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


#: case -> (checkpoint, how it is broken, words the one-line error must hold)
CASES = {
    "n_embd-not-the-weights": ("gpt2", lambda d, s: edit_config(d, n_embd=48), "n_embd=48"),
    "num_key_value_heads-3": ("llama", lambda d, s: edit_config(d, num_key_value_heads=3), "num_key_value_heads=3"),
    "n_head-0": ("gpt2", lambda d, s: edit_config(d, n_head=0), "n_head=0"),
    "n_head-3": ("gpt2", lambda d, s: edit_config(d, n_head=3), "n_head=3 does not divide n_embd=64"),
    "n_embd-string": ("gpt2", lambda d, s: edit_config(d, n_embd="32"), "'n_embd'"),
    "hidden_size-null": ("gpt2", lambda d, s: edit_config(d, hidden_size=None), "hidden_size=None"),
    "torch_dtype-evil": ("gpt2", lambda d, s: edit_config(d, dtype=..., torch_dtype="evil"), "torch_dtype='evil'"),
    "bert-config-relabelled-gpt2": ("gpt2", _bert_config_relabelled, "model_type='gpt2'"),
    "n_layer-1000-with-2-layers": ("gpt2", lambda d, s: edit_config(d, n_layer=1000), "n_layer=1000"),
    "n_layer-1-with-2-layers": ("gpt2", lambda d, s: edit_config(d, n_layer=1), "n_layer=1"),
    "missing-attention-tensor": ("gpt2", lambda d, s: drop_tensor(d, "transformer.h.0.attn.c_proj.weight"),
                                 "'h.0.attn.c_proj.weight' is missing"),
    "header-shape-lie": ("gpt2", _header_shape_lie, "h.0.attn.c_proj.weight [32, 128]"),
    "bin-index-without-metadata": ("gpt2", _bin_index_without_metadata, "no 'metadata' object"),
    "safetensors-index-maps-to-config-json": ("gpt2", _index_maps_a_tensor_to_config_json,
                                              "'config.json', which is not a .safetensors shard"),
}

COMMANDS = {
    "steer": lambda d, out: ["steer", str(d), "--eigvec", "0", "--gain", "1", "--out", str(out)],
    "analyze": lambda d, out: ["analyze", str(d), "--spectra-only", "--no-plots", "--out", str(out)],
    "simulate-bridge": lambda d, out: ["simulate", "bridge", "--model", str(d), "--runs", "1", "--t1", "2",
                                       "--out", str(out)],
    "collapse": lambda d, out: ["collapse", str(d), "--passes", "1", "--n-prompts", "2", "--length", "4",
                                "--out", str(out)],
}


def _broken(saved, tmp_path: Path, case: str) -> Path:
    family, breaks, _ = CASES[case]
    d = tmp_path / "model"
    shutil.copytree(saved[family], d)
    breaks(d, saved)
    return d


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_config_that_does_not_fit_is_one_line_and_nothing_is_written(saved, tmp_path, case, command) -> None:
    from steerformer_cli.main import app

    d = _broken(saved, tmp_path, case)
    res = runner.invoke(app, COMMANDS[command](d, tmp_path / "out"))
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and CASES[case][2] in last, res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", list(CASES))
def test_the_library_refuses_before_building_the_model(saved, tmp_path, case) -> None:
    d = _broken(saved, tmp_path, case)
    with pytest.raises(SteerformerError) as info:
        open_source(d)
        load_model(d)
    assert CASES[case][2] in str(info.value) and "\n" not in str(info.value)


def test_consistent_checkpoints_of_every_family_pass(tmp_path) -> None:
    """No false alarm: each family's own checkpoint passes the checks and loads."""
    for name in FAMILIES:
        make_model(name, dtype=torch.float32).save_pretrained(tmp_path / name)
    for name in SPECS:
        make_model(name, head=True, dtype=torch.float32).save_pretrained(tmp_path / name)
    for d in sorted(tmp_path.iterdir()):
        src = open_source(d)
        assert src.adapter.n_layers == len(src.adapter.layer_sequence())
        load_model(d)


def test_a_layer_count_error_names_what_the_weights_hold(saved, tmp_path) -> None:
    d = _broken(saved, tmp_path, "n_layer-1000-with-2-layers")
    with pytest.raises(CheckpointError, match=r"n_layer=1000 but the checkpoint holds the attention weights of 2 layers"):
        open_source(d)
