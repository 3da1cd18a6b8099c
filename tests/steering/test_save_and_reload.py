"""Save, reload with plain transformers, undo (in memory and from disk), ALBERT untying, and the
CLI's steer / unsteer / verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AlbertModel, AutoModel, BertForMaskedLM, GPT2LMHeadModel

from steerformer import layer_matrices
from steerformer.steering import save_steered, steer, unsteer, unsteer_checkpoint, verify_checkpoint
from steerformer.steering.common import METADATA_KEY, read_safetensors_metadata

from tests.conftest import random_vector
from tests.models import make_model


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("family,cls", [("gpt2", GPT2LMHeadModel), ("bert-mlm", BertForMaskedLM)])
def test_save_reload_matches_in_memory_and_undo_is_bit_identical(tmp_path: Path, family: str, cls) -> None:
    model = make_model(family)
    original = _state(model)
    rec = steer(model, random_vector(), strength=20.0, report=False)
    out = save_steered(model, tmp_path / "steered")
    loaded = cls.from_pretrained(out, attn_implementation="eager").eval()  # plain transformers
    steered = _state(model)
    assert all(torch.equal(steered[k], v) for k, v in loaded.state_dict().items())
    ids = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, loaded(input_ids=ids).logits
    # Same weights; float64 BLAS may still differ in the last bit between two model objects.
    assert (a - b).abs().max().item() < 1e-12
    # Provenance: JSON and safetensors metadata both hold the record.
    meta = json.loads(read_safetensors_metadata(out / "model.safetensors")[METADATA_KEY])
    assert meta["records"][0]["gain"] == rec.gain
    assert json.loads((out / "steerformer" / "record.json").read_text())["records"][0]["module"] == rec.module
    # Undo in memory, and from the checkpoint alone.
    unsteer(model)
    assert all(torch.equal(original[k], v) for k, v in model.state_dict().items())
    restored = unsteer_checkpoint(out, tmp_path / "restored")
    back = cls.from_pretrained(restored).state_dict()
    assert all(torch.equal(original[k], v) for k, v in back.items())
    assert not (restored / "steerformer").exists()
    assert verify_checkpoint(out)["ok"]


def test_albert_shared_and_untied_both_load_in_plain_transformers(tmp_path: Path) -> None:
    base = make_model("albert")  # 4 layers, one shared group
    original = _state(base)
    F0 = layer_matrices(base).matrices.clone()
    rec = steer(base, random_vector(), strength=3.0, solve="exact", report=False)
    assert rec.layers_changed == [0, 1, 2, 3] and not rec.untied
    shared_dir = save_steered(base, tmp_path / "shared")
    F_shared = layer_matrices(AlbertModel.from_pretrained(shared_dir)).matrices
    assert all(not torch.allclose(F_shared[k], F0[k]) for k in range(4))
    unsteer(base)

    rec = steer(base, random_vector(), strength=3.0, solve="exact", untie_last=True, report=False)
    assert rec.untied and rec.layers_changed == [3]
    untied_dir = save_steered(base, tmp_path / "untied")
    loaded = AlbertModel.from_pretrained(untied_dir)
    assert loaded.config.num_hidden_groups == 4
    F_untied = layer_matrices(loaded).matrices
    assert all(torch.equal(F_untied[k], F0[k]) for k in range(3))
    assert not torch.allclose(F_untied[3], F0[3])
    unsteer(base)  # also re-ties the groups
    assert base.config.num_hidden_groups == 1
    assert set(base.state_dict()) == set(original)
    assert all(torch.equal(original[k], v) for k, v in base.state_dict().items())
    back = AlbertModel.from_pretrained(unsteer_checkpoint(untied_dir, tmp_path / "back"))
    assert back.config.num_hidden_groups == 1
    assert all(torch.equal(original[k], v) for k, v in back.state_dict().items())


def test_cli_steer_unsteer_verify(tmp_path: Path) -> None:
    import numpy as np
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    model = make_model("bert")
    model.save_pretrained(tmp_path / "base")
    vec = tmp_path / "u.npy"
    np.save(vec, random_vector().numpy())
    runner = CliRunner()
    res = runner.invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(vec), "--strength", "4",
                              "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert "gain" in res.output and "->" in res.output and "KL" in res.output
    res = runner.invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(vec), "--strength", "4",
                              "--out", str(tmp_path / "s")])
    assert res.exit_code == 2 and "overwrite" in res.output
    res = runner.invoke(app, ["verify", str(tmp_path / "s")])
    assert res.exit_code == 0 and "FAIL" not in res.output, res.output
    res = runner.invoke(app, ["unsteer", str(tmp_path / "s"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    a = AutoModel.from_pretrained(tmp_path / "base").state_dict()
    b = AutoModel.from_pretrained(tmp_path / "o").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    res = runner.invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(vec), "--strength", "0"])
    assert res.exit_code == 2 and "strength=0.0" in res.output
