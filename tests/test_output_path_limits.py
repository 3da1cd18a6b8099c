"""Every writer goes through the one output path, so the limits of the file system are one line
naming the flag and leave nothing behind (no folder, no temporary, no lock): a name longer than
the file system allows, a symlink loop, and a file-size limit (``ulimit -f``: Python ignores
SIGXFSZ, so the write fails with EFBIG — from Python or from safetensors' Rust writer)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
import torch

from tests.cli_process import one_error_line, run_cli
from tests.models import make_model


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("lim") / "model"
    make_model("gpt2", dtype=torch.float32).save_pretrained(d)
    return d


def _left(root: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name not in keep)


def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))  # the model.safetensors is ~200 KB


WRITERS = {
    "steer": ["steer", "{model}", "--eigvec", "0", "--gain", "1", "--out", "{out}"],
    "steer-lazy": ["steer", "{model}", "--eigvec", "0", "--gain", "1", "--solve", "exact", "--lazy", "--out", "{out}"],
    "unsteer": ["unsteer", "{steered}", "--out", "{out}"],
}


@pytest.fixture(scope="module")
def steered(model) -> Path:
    from steerformer.steering import steer_checkpoint

    steer_checkpoint(model, model.parent / "steered", eigvec=0, gain=1.0)
    return model.parent / "steered"


@pytest.mark.parametrize("case", ["name-too-long", "symlink-loop", "ulimit-f"])
@pytest.mark.parametrize("command", list(WRITERS))
def test_a_file_system_limit_is_one_line_naming_the_flag_and_leaves_nothing(model, steered, tmp_path, case,
                                                                           command) -> None:
    out = tmp_path / ("x" * 300 if case == "name-too-long" else "o")
    if case == "symlink-loop":
        os.symlink(tmp_path / "loop-a", tmp_path / "loop-b")
        os.symlink(tmp_path / "loop-b", tmp_path / "loop-a")
        out = tmp_path / "loop-a" / "o"
    args = [a.format(model=model, steered=steered, out=out) for a in WRITERS[command]]
    before = set(p.name for p in tmp_path.iterdir())
    res = run_cli(args, timeout=300, preexec_fn=_limit_file_size if case == "ulimit-f" else None)
    line = one_error_line(res)
    assert line.startswith("error: --out="), line
    words = {"name-too-long": "longer than it allows", "symlink-loop": "symlink loop", "ulimit-f": "size limit"}
    assert words[case] in line, line
    assert _left(tmp_path, before) == []  # no output, no temporary, no lock file


def test_a_record_past_the_size_limit_leaves_nothing(model, tmp_path) -> None:
    res = run_cli(["steer", model, "--eigvec", "0", "--gain", "1", "--out", tmp_path / "o", "--record",
                   tmp_path / "r.json"], timeout=300, preexec_fn=_limit_file_size)
    line = one_error_line(res)
    assert "size limit" in line, line
    assert _left(tmp_path, set()) == []
