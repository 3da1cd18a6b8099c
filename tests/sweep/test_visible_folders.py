"""`sweep` names its per-checkpoint folders visibly (``./ckpt`` → ``ckpt``, never ``._ckpt``) and a
rerun into the same folder still reuses every finished task."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from steerformer.sweep import Checkpoint, checkpoints_from, sweep


@pytest.mark.parametrize("model, revision, key", [
    ("./ckpt", None, "ckpt"), ("../runs/ckpt", None, "runs_ckpt"), (".hidden", None, "hidden"),
    ("EleutherAI/pythia-160m", "step1000", "EleutherAI_pythia-160m_step1000"), ("./", None, "checkpoint"),
])
def test_checkpoint_keys_are_visible_folder_names(model, revision, key) -> None:
    assert Checkpoint(model, revision).key == key


def test_sweep_of_a_relative_path_writes_no_hidden_folder_and_resumes(tmp_path, monkeypatch) -> None:
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=32)).save_pretrained(
        tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    first = sweep(checkpoints_from(models="./ckpt"), "out", plots=False)
    assert (first.tasks_run, first.tasks_reused) == (2, 0)
    names = [name for _, dirs, files in os.walk(tmp_path / "out") for name in dirs + files]
    assert names and not [n for n in names if n.startswith(".")], names
    assert (tmp_path / "out" / "ckpt" / "report.json").is_file()
    assert sorted(p.name for p in (tmp_path / "out" / "tasks" / "ckpt").iterdir()) == ["slot_0000.json", "slot_0001.json"]
    again = sweep(checkpoints_from(models="./ckpt"), "out", plots=False)
    assert (again.tasks_run, again.tasks_reused) == (0, 2)
    assert again.rows == first.rows
