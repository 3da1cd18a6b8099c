"""A collapse run folder is written pass by pass, so it holds the folder's writer lock for the whole
run (outputs.writer_lock, as every other output): a second run writing the same folder is one line
naming ``--out`` and touches nothing. A file-size limit (``ulimit -f``) is one line naming ``--out``
and a new run leaves nothing behind (a full disk: tests/test_full_disk.py)."""

from __future__ import annotations

import hashlib
import os
import resource

import pytest

from tests.cli_process import one_error_line
from tests.cli_process import run_cli as run_process
from tests.conftest import run_cli

COLLAPSE = ["--passes", "2", "--n-prompts", "2", "--length", "4", "--no-decode"]


def test_a_second_run_into_the_same_folder_is_refused_in_one_line(tiny_checkpoint, tmp_path, monkeypatch) -> None:
    import fcntl

    cache = tmp_path / "cache"
    monkeypatch.setenv("STEERFORMER_CACHE", str(cache))
    out = tmp_path / "run"
    lock = cache / "locks" / (hashlib.sha256(str(out.resolve()).encode()).hexdigest() + ".lock")
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)  # another collapse writing this folder right now
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        res = run_cli(["collapse", tiny_checkpoint, *COLLAPSE, "--out", out])
    finally:
        os.close(fd)
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --out=") and "another steerformer command" in last, res.output
    assert not out.exists()
    # the lock is released with the run: once free, the same command writes the run
    assert run_cli(["collapse", tiny_checkpoint, *COLLAPSE, "--out", out]).exit_code == 0
    assert (out / "run.json").is_file() and not lock.exists()


#: 300 bytes: run.json is larger (Python's own EFBIG); 2 KiB: the state is larger, and torch.save's zip
#: writer says "unexpected pos 768 vs 662" in its own words
@pytest.mark.parametrize("limit", [300, 2048], ids=["run-json", "torch-save"])
def test_collapse_past_the_file_size_limit_is_one_line_naming_out(tiny_checkpoint, tmp_path, limit) -> None:
    out = tmp_path / "run"
    res = run_process(["collapse", tiny_checkpoint, *COLLAPSE, "--out", out],
                      preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    line = one_error_line(res)
    assert line.startswith("error: --out=") and "size limit" in line and "Nothing was left behind" in line, line
    assert os.listdir(tmp_path) == []
