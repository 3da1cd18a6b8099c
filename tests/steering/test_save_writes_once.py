"""save_steered writes the weights once, from memory, with the record already in their metadata:
the file holds exactly the tensors (names, dtypes, shapes, bytes) that transformers' own
save_pretrained writes for the same model, loads with plain from_pretrained, and is never read
back or rewritten while saving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import steerformer.steering.common as common
from steerformer.steering import save_steered, steer, verify_checkpoint
from steerformer.steering.common import METADATA_KEY, read_safetensors_metadata

from tests.conftest import random_vector
from tests.models import DECLARED_FAMILIES, make_model


def _tensors(path: Path) -> dict[str, tuple[str, list, bytes]]:
    with safe_open(str(path), "pt") as f:
        return {k: (str(f.get_tensor(k).dtype), list(f.get_tensor(k).shape),
                    f.get_tensor(k).contiguous().view(torch.uint8).numpy().tobytes()) for k in f.keys()}


@pytest.mark.parametrize("family", ["gpt2", "bert-mlm", "albert", "llama", "mixtral", "phi3", "gemma2"])
def test_saved_weights_are_the_ones_save_pretrained_writes(tmp_path: Path, family: str) -> None:
    model = make_model(family, head=True) if family in DECLARED_FAMILIES else make_model(family)
    steer(model, random_vector(model.config.hidden_size), strength=5.0, report=False)
    out = save_steered(model, tmp_path / "steered")
    model.save_pretrained(tmp_path / "plain")  # transformers' own file of the same (steered) weights
    assert _tensors(out / "model.safetensors") == _tensors(tmp_path / "plain" / "model.safetensors")
    assert (out / "config.json").read_text() == (tmp_path / "plain" / "config.json").read_text()
    payload = json.loads((out / "steerformer" / "record.json").read_text())
    assert json.loads(read_safetensors_metadata(out / "model.safetensors")[METADATA_KEY]) == payload
    assert verify_checkpoint(out)["ok"]


def test_saving_never_reads_back_or_rewrites_the_weights(tmp_path: Path, monkeypatch) -> None:
    model = make_model("gpt2")
    steer(model, random_vector(), strength=5.0, report=False)

    def refused(*args, **kwargs):
        raise AssertionError("the weights file was read back or rewritten while saving")

    monkeypatch.setattr(common, "safetensors_hashes", refused)  # what hashed the written file
    monkeypatch.setattr(common, "rewrite_shard", refused)  # what added the record to its header
    out = save_steered(model, tmp_path / "steered")
    monkeypatch.undo()
    checks = verify_checkpoint(out)["checks"]  # hashed from the file, independently of the save
    assert all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
