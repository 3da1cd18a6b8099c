"""``unsteer`` checks the whole steered checkpoint against the record's hashes before it writes a
"restored original": a changed byte anywhere — in a tensor the edit did not touch, in config.json,
in the record — is refused naming what changed, and nothing is written."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from steerformer.errors import CheckpointError
from steerformer.steering import save_steered, steer, unsteer_checkpoint, verify_checkpoint

from ..broken_checkpoints import edit_header, flip_tensor_byte
from ..models import make_model

runner = CliRunner()


@pytest.fixture(scope="module")
def steered(tmp_path_factory) -> Path:
    model = make_model("gpt2", dtype=torch.float32)
    steer(model, torch.ones(64, dtype=torch.float64), gain=0.5, solve="exact", report=False)
    return save_steered(model, tmp_path_factory.mktemp("s") / "steered")


def _config_epsilon(d: Path) -> str:  # 1e-05 -> 1e-03: a one-byte edit that silently changes every norm
    text = (d / "config.json").read_text()
    assert '"layer_norm_epsilon": 1e-05' in text
    (d / "config.json").write_text(text.replace('"layer_norm_epsilon": 1e-05', '"layer_norm_epsilon": 1e-03'))
    return "config.json: changed"


def _untouched_tensor(d: Path) -> str:
    flip_tensor_byte(d / "model.safetensors", "transformer.h.0.mlp.c_fc.weight")
    return "transformer.h.0.mlp.c_fc.weight: saved bytes differ"


def _edited_tensor(d: Path) -> str:
    flip_tensor_byte(d / "model.safetensors", "transformer.h.1.attn.c_proj.weight", offset=64)
    return "transformer.h.1.attn.c_proj.weight: saved bytes differ"


def _header_shape(d: Path) -> str:  # same bytes, another shape
    edit_header(d / "model.safetensors", lambda h: h["transformer.h.0.mlp.c_proj.weight"].update(shape=[128, 128]))
    return "transformer.h.0.mlp.c_proj.weight: header says"


def _record_field(d: Path) -> str:
    p = d / "steerformer" / "record.json"
    p.write_text(p.read_text().replace('"gain": 0.5', '"gain": 0.25', 1))
    return "record_sha256 differs"


def _tokenizer_file(d: Path) -> str:
    (d / "README.md").write_text((d / "README.md").read_text() + "\nedited\n")
    return "README.md: changed"


TAMPER = {"config-byte": _config_epsilon, "untouched-tensor-byte": _untouched_tensor,
          "edited-tensor-byte": _edited_tensor, "header-shape": _header_shape, "record-field": _record_field,
          "model-card": _tokenizer_file}


@pytest.mark.parametrize("case", list(TAMPER))
def test_unsteer_refuses_a_tampered_checkpoint_and_writes_nothing(steered, tmp_path, case) -> None:
    d = tmp_path / "s"
    shutil.copytree(steered, d)
    words = TAMPER[case](d)
    with pytest.raises(CheckpointError, match="is not as it was saved") as info:
        unsteer_checkpoint(d, tmp_path / "out")
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()
    from steerformer_cli.main import app

    res = runner.invoke(app, ["unsteer", str(d), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "Traceback" not in res.output and words in res.output, res.output
    assert not (tmp_path / "out").exists()
    assert not verify_checkpoint(d)["ok"]  # verify names the same thing


def test_an_untampered_checkpoint_unsteers_to_the_original_bytes(steered, tmp_path) -> None:
    from safetensors.torch import load_file

    out = unsteer_checkpoint(steered, tmp_path / "out")
    restored = load_file(str(out / "model.safetensors"))
    edited = load_file(str(steered / "model.safetensors"))
    original = load_file(str(steered / "steerformer" / "original.safetensors"))
    for k, v in restored.items():
        ref = original.get(k.removeprefix("transformer."), edited[k])
        assert hashlib.sha256(v.numpy().tobytes()).digest() == hashlib.sha256(ref.numpy().tobytes()).digest(), k


def test_a_file_the_record_does_not_list_is_not_copied_and_does_not_block(steered, tmp_path) -> None:
    d = tmp_path / "s"
    shutil.copytree(steered, d)
    (d / "notes.txt").write_text("mine")
    out = unsteer_checkpoint(d, tmp_path / "out")
    assert not (out / "notes.txt").exists()
