"""An output is never written inside (or around) anything a command reads: every file and folder
named on its command line — the model, a direction folder, a prompts file — is an input of every
output check of that command (``outputs.command_inputs``, entered by the CLI for each command), not
only the inputs a writer was told about."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from ..conftest import run_cli


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    import torch

    from ..models import make_model
    from ..test_prompt_batch import _gpt2_like_tokenizer

    d = tmp_path_factory.mktemp("inputs") / "model"
    make_model("gpt2", dtype=torch.float32).save_pretrained(d)
    _gpt2_like_tokenizer().save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def direction(tmp_path_factory) -> Path:
    from steerformer.steering import Direction

    d = tmp_path_factory.mktemp("dir") / "D"
    Direction({1: np.ones((1, 64))}, method="a test vector").save(d)
    return d


def test_a_control_vector_is_never_written_inside_the_direction_it_exports(direction) -> None:
    before = tree(direction)
    res = run_cli(["direction", "export-gguf", direction, "--model-hint", "gpt2", "--out", direction / "cv.gguf"])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --out=") and "input folder" in last, res.output
    assert tree(direction) == before


def test_a_direction_never_replaces_a_folder_holding_its_prompts(model, direction, tmp_path) -> None:
    """``direction make --positive D/pos.txt --out D --overwrite``: D is an earlier direction, so the
    rules let it be replaced — with the prompts file the command is reading inside it."""
    import shutil

    d = tmp_path / "D"
    shutil.copytree(direction, d)
    (d / "pos.txt").write_text("a cat\nthe cat\n")
    (tmp_path / "neg.txt").write_text("a dog\nthe dog\n")
    before = tree(d)
    res = run_cli(["direction", "make", model, "--positive", d / "pos.txt", "--negative",
                   tmp_path / "neg.txt", "--layers", "1", "--out", d, "--overwrite"])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --out=") and "contains" in last, res.output
    assert tree(d) == before
