"""A full disk while a command writes its output is one line (exit 2) and leaves nothing behind:
``steer --out`` (and its ``--record``) writes nothing at all; ``collapse --out`` removes a new run
that had no completed pass and keeps the completed passes of a longer one for ``--resume``.

The disk is made full by injecting the error the writer meets (an OSError, or the message
safetensors' Rust writer raises), and — where this machine lets the test mount one — by a real
tmpfs of a few kilobytes."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli


class SafetensorError(Exception):
    """What safetensors' Rust writer raises on a full disk (not an OSError)."""


def _full(kind: str, path) -> Exception:
    if kind == "oserror":
        return OSError(errno.ENOSPC, "No space left on device", str(path))
    return SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


@pytest.mark.parametrize("kind", ["oserror", "safetensors-rust-error"])
def test_steer_out_on_a_full_disk_is_one_line_and_writes_nothing(tiny_checkpoint, tmp_path, monkeypatch, kind) -> None:
    from transformers import PreTrainedModel

    def save_until_full(self, path, **kw):
        Path(path, "model.safetensors").write_bytes(b"\0" * 1000)  # part of it, then the disk is full
        raise _full(kind, Path(path, "model.safetensors"))

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_until_full)
    res = run_cli(["steer", tiny_checkpoint, "--direction", tiny_checkpoint.parent / "u.npy", "--gain", "1",
                   "--solve", "exact", "--out", tmp_path / "out", "--record", tmp_path / "rec.json"])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: --out=") and "no space left on the device" in last and "Nothing was written" in last
    assert sorted(os.listdir(tmp_path)) == []  # no folder, no temporary, no record


def _fail_at_pass(monkeypatch, index: int) -> None:
    """np.savez of pass file ``index`` (1-based) writes a little, then the disk is full."""
    real = np.savez

    def savez(file, **arrays):
        if f"pass_{index:06d}" in getattr(file, "name", str(file)):
            file.write(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device", getattr(file, "name", None))
        return real(file, **arrays)

    monkeypatch.setattr(np, "savez", savez)


COLLAPSE = ["--n-prompts", "2", "--length", "4", "--no-decode"]


def test_collapse_out_full_before_the_first_pass_leaves_nothing(tiny_checkpoint, tmp_path, monkeypatch) -> None:
    _fail_at_pass(monkeypatch, 1)
    res = run_cli(["collapse", tiny_checkpoint, "--passes", "2", *COLLAPSE, "--out", tmp_path / "run"])
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: --out=") and "no space left" in last and "Nothing was left behind" in last
    assert os.listdir(tmp_path) == []


def test_collapse_out_full_later_keeps_the_completed_passes_for_resume(tiny_checkpoint, tmp_path, monkeypatch) -> None:
    from steerformer.collapse import CollapseResult

    _fail_at_pass(monkeypatch, 2)
    res = run_cli(["collapse", tiny_checkpoint, "--passes", "3", *COLLAPSE, "--out", tmp_path / "run"])
    assert res.exit_code == 2 and "The 1 completed pass is kept" in res.output and "--resume" in res.output
    leftovers = [p.name for p in (tmp_path / "run").rglob(".*")]
    assert leftovers == [], leftovers  # no temporary file
    monkeypatch.undo()  # space again
    three = ["collapse", tiny_checkpoint, "--passes", "3", *COLLAPSE]
    assert run_cli([*three, "--out", tmp_path / "run", "--resume"]).exit_code == 0
    assert run_cli([*three, "--out", tmp_path / "clean"]).exit_code == 0
    resumed, clean = CollapseResult.load(tmp_path / "run"), CollapseResult.load(tmp_path / "clean")
    np.testing.assert_array_equal(resumed.e, clean.e)


@pytest.fixture
def tiny_disk(tmp_path):
    """A real tmpfs of 24 KiB (needs the right to mount; skipped elsewhere)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); the injected errors cover it")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("command", ["steer", "collapse"])
def test_a_real_full_disk(tiny_checkpoint, tiny_disk, command) -> None:
    if command == "steer":
        args = ["steer", tiny_checkpoint, "--direction", tiny_checkpoint.parent / "u.npy", "--gain", "1",
                "--solve", "exact"]
    else:
        args = ["collapse", tiny_checkpoint, "--passes", "50", "--n-prompts", "20", "--length", "16", "--no-decode"]
    res = run_cli([*args, "--out", tiny_disk / "out"])
    assert res.exit_code == 2 and "no space left on the device" in res.output, res.output
    assert os.listdir(tiny_disk) == [] or command == "collapse" and "kept" in res.output
