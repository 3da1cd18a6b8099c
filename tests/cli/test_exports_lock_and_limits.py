"""Exports write like every other output (steering/exports.py, formats/): the output's writer lock
is held around the whole export, for every format (a second writer is one line, before the
checkpoint is read; a lock file that is a link or a folder is refused first); a killed export's
temporary is removed on the next run; a full disk or a file-size limit (``ulimit -f``) is one line
naming ``--out`` and leaves nothing behind — also for ``direction export-gguf``."""

from __future__ import annotations

import errno
import hashlib
import os
import resource
from pathlib import Path

import pytest

import steerformer as sf

from ..cli_process import one_error_line
from ..cli_process import run_cli as run_process
from ..conftest import random_vector, run_cli
from ..formats.gguf_sources import tiny_llama, write_llama_source

FORMATS = ["checkpoint", "peft", "gguf", "control-vector"]


@pytest.fixture(scope="module")
def steered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("locked")
    model = tiny_llama()
    source = write_llama_source(tmp / "source.gguf", model)
    calibrated = tiny_llama()
    sf.steer(model, random_vector(64, seed=1), strength=1.0, layer=1, report=False)
    # a control vector is the vectors a KL-calibrated steer added
    sf.steer(calibrated, random_vector(64, seed=1), layer=1, positions="all", report=False, progress=False)
    return (sf.save_steered(model, tmp / "steered"), sf.save_steered(calibrated, tmp / "calibrated")), source


def args_of(fmt, folders, source, out):
    extra = {"gguf": ["--source", source], "control-vector": ["--model-hint", "llama"]}.get(fmt, [])
    return ["export", folders[fmt == "control-vector"], "--format", fmt, "--out", out, *extra]


def out_of(tmp_path: Path, fmt: str) -> Path:
    return tmp_path / "exports" / ("o.gguf" if fmt in ("gguf", "control-vector") else "o")


def lock_path(target: Path, cache: Path) -> Path:
    """Where the writer lock of ``target`` lives (outputs.writer_lock's documented place)."""
    return cache / "locks" / (hashlib.sha256(str(target.resolve()).encode()).hexdigest() + ".lock")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_second_writer_of_an_export_is_refused_in_one_line(steered, tmp_path, cache, fmt, monkeypatch) -> None:
    import fcntl

    from steerformer.steering import checkpoint

    folder, source = steered
    out = out_of(tmp_path, fmt)
    out.parent.mkdir()
    lock = lock_path(out, cache)
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)  # another command writing this output right now
    fcntl.flock(fd, fcntl.LOCK_EX)
    read = []
    monkeypatch.setattr(checkpoint, "check_as_saved", lambda *a, **k: read.append(a))
    try:
        res = run_cli(args_of(fmt, folder, source, out))
    finally:
        os.close(fd)
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --out=") and "another steerformer command" in last, res.output
    assert read == [] and not out.exists() and os.listdir(out.parent) == []  # refused before any work


@pytest.mark.parametrize("what", ["symlink", "folder"])
@pytest.mark.parametrize("fmt", ["checkpoint", "gguf", "control-vector"])
def test_a_lock_file_that_is_a_link_or_a_folder_is_refused_first(steered, tmp_path, cache, fmt, what,
                                                                 monkeypatch) -> None:
    from steerformer.steering import checkpoint

    folder, source = steered
    out = out_of(tmp_path, fmt)
    out.parent.mkdir()
    lock = lock_path(out, cache)
    lock.parent.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    if what == "symlink":
        lock.symlink_to(victim)
    else:
        lock.mkdir()
    read = []
    monkeypatch.setattr(checkpoint, "check_as_saved", lambda *a, **k: read.append(a))
    res = run_cli(args_of(fmt, folder, source, out))
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --out=") and str(lock) in last, res.output
    assert ("symbolic link" if what == "symlink" else "a folder") in last, last
    assert read == [] and not out.exists() and victim.read_text() == "keep"
    assert lock.is_symlink() if what == "symlink" else lock.is_dir()  # not ours to remove


def _dead_pid() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_killed_exports_temporary_is_removed_on_the_next_run(steered, tmp_path, fmt) -> None:
    folder, source = steered
    out = out_of(tmp_path, fmt)
    out.parent.mkdir()
    tmp = out.parent / f".{out.name}.tmp-{_dead_pid()}-0a1b2c3d"  # what a killed writer leaves
    if fmt in ("gguf", "control-vector"):
        tmp.write_bytes(b"GGUF" + b"\0" * 100)
    else:
        tmp.mkdir()
        (tmp / "model.safetensors").write_bytes(b"\0" * 100)
    res = run_cli(args_of(fmt, folder, source, out))
    assert res.exit_code == 0, res.output
    assert sorted(os.listdir(out.parent)) == [out.name]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_on_a_full_disk_is_one_line_naming_out_and_leaves_nothing(steered, tmp_path, fmt,
                                                                            monkeypatch) -> None:
    import gguf
    import safetensors.torch
    from transformers import PreTrainedModel

    folder, source = steered
    out = out_of(tmp_path, fmt)
    out.parent.mkdir()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", None)

    if fmt in ("gguf", "control-vector"):
        monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", full)
    elif fmt == "peft":
        monkeypatch.setattr(safetensors.torch, "save_file", full)
    else:
        monkeypatch.setattr(PreTrainedModel, "save_pretrained", full)
    res = run_cli(args_of(fmt, folder, source, out))
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --out=") and "no space left" in last, res.output
    assert os.listdir(out.parent) == []


def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))  # smaller than any of these outputs


@pytest.mark.parametrize("command", ["gguf", "control-vector", "direction export-gguf"])
def test_an_export_past_the_file_size_limit_is_one_line_naming_out(steered, tmp_path, command) -> None:
    import numpy as np

    folder, source = steered
    out = tmp_path / "exports" / "o.gguf"
    out.parent.mkdir()
    if command == "direction export-gguf":
        np.save(tmp_path / "v.npy", np.ones(512, dtype=np.float32))
        args = ["direction", "export-gguf", tmp_path / "v.npy", "--layers", "1,2", "--model-hint", "llama",
                "--out", out]
    else:
        args = args_of(command, folder, source, out)
    res = run_process(args, preexec_fn=_limit_file_size)
    line = one_error_line(res)
    assert line.startswith("error: --out=") and "size limit" in line, line
    assert os.listdir(out.parent) == []


@pytest.mark.parametrize("command,limit", [("gguf", 64 << 10), ("direction export-gguf", 8 << 10)])
def test_a_write_cut_by_the_size_limit_in_the_writers_own_words_is_one_line_naming_out(steered, tmp_path, command,
                                                                                       limit) -> None:
    """numpy's ``tofile`` says "5024 requested and 0 written" (no errno) when the limit falls inside a
    tensor: the temporary that reached the limit says what happened."""
    import numpy as np

    folder, source = steered
    out = tmp_path / "exports" / "o.gguf"
    out.parent.mkdir()
    if command == "direction export-gguf":
        np.save(tmp_path / "v.npy", np.ones(4096, dtype=np.float32))  # 2 x 16 KiB of tensors
        args = ["direction", "export-gguf", tmp_path / "v.npy", "--layers", "1,2", "--model-hint", "llama",
                "--out", out]
    else:
        args = args_of(command, folder, source, out)
    res = run_process(args, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    line = one_error_line(res)
    assert line.startswith("error: --out=") and "size limit" in line and "Nothing was written" in line, line
    assert os.listdir(out.parent) == []
