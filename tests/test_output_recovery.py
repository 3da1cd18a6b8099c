"""Two output cases no earlier test exercised for real:

- an overwrite killed (``kill -9``) between its two renames leaves the previous output aside as
  ``.NAME.old-PID-XXXX``; the next command that touches the path — a write or a read — puts it back,
  bit for bit, and says so;
- a read-only output folder (or file) is refused in one line by every command, and stays as it
  was. Root may write anywhere, so as root the commands run in a forked child that has dropped
  its privileges to ``nobody``."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import kill_when_ready, run_cli
from tests.models import make_model


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ---- kill -9 between the two renames of an overwrite ------------------------------------------
_KILL_BETWEEN_RENAMES = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    import torch
    from tests.models import make_model
    from steerformer.steering import save_steered, steer

    model = make_model("gpt2", dtype=torch.float32)
    steer(model, torch.ones(64, dtype=torch.float64), gain=2.0, solve="exact", report=False)
    real = os.replace

    def replace(src, dst):
        real(src, dst)
        if ".old-" in str(dst):  # the old output is aside, the new one not yet in place
            Path({ready!r}).write_text("ready")
            time.sleep(120)

    os.replace = replace
    save_steered(model, {out!r}, overwrite=True)
""")


@pytest.fixture(scope="module")
def killed_once(tmp_path_factory) -> tuple[Path, dict]:
    """A steered output ``out``, then an overwrite of it killed between its two renames (once)."""
    from steerformer.steering import save_steered, steer

    tmp_path = tmp_path_factory.mktemp("killed")
    model = make_model("gpt2", dtype=torch.float32)
    steer(model, torch.ones(64, dtype=torch.float64), gain=0.5, solve="exact", report=False)
    out = save_steered(model, tmp_path / "out")
    before = _tree(out)
    ready = tmp_path / "ready"
    kill_when_ready(_KILL_BETWEEN_RENAMES.format(repo=str(Path(__file__).parents[1]), ready=str(ready), out=str(out)),
                    ready)
    ready.unlink()
    return out, before


@pytest.fixture
def killed_overwrite(killed_once, tmp_path) -> tuple[Path, dict, Path]:
    """A copy of what the kill left (the old output aside, the new one in its temporary folder, no
    output): (out, the old output's files, the folder it was moved aside to)."""
    import shutil

    out, before = killed_once
    for p in out.parent.iterdir():
        shutil.copytree(p, tmp_path / p.name, symlinks=True)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".out.old-")]
    assert not (tmp_path / "out").exists() and len(aside) == 1
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")]
    return tmp_path / "out", before, aside[0]


def test_the_next_write_puts_the_old_output_back_then_obeys_the_rules(killed_overwrite, caplog) -> None:
    out, before, aside = killed_overwrite
    with caplog.at_level("WARNING"):
        res = run_cli(["unsteer", out.parent / "elsewhere", "--out", out])  # a write to the same path, refused
    assert res.exit_code == 2
    assert _tree(out) == before and not aside.exists()
    assert str(aside) in caplog.text and "back in" in caplog.text
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(".out.")]
    assert leftovers == []  # the dead writer's temporary folder is gone too


@pytest.mark.parametrize("command", ["verify", "analyze"])
def test_the_next_read_puts_the_old_output_back(killed_overwrite, caplog, command) -> None:
    out, before, aside = killed_overwrite
    args = {"verify": ["verify", out],
            "analyze": ["analyze", out, "--spectra-only", "--no-plots", "--out", out.parent / "report"]}[command]
    with caplog.at_level("WARNING"):
        res = run_cli(args)
    assert res.exit_code == 0, res.output
    assert _tree(out) == before and not aside.exists() and "back in" in caplog.text


def test_an_overwrite_after_the_kill_replaces_the_restored_output(killed_overwrite) -> None:
    from steerformer.steering import save_steered, steer

    out, before, aside = killed_overwrite
    model = make_model("gpt2", dtype=torch.float32)
    steer(model, torch.ones(64, dtype=torch.float64), gain=3.0, solve="exact", report=False)
    save_steered(model, out, overwrite=True)
    assert json.loads((out / "steerformer" / "record.json").read_text())["records"][0]["gain"] == 3.0
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".out.")] == []


# ---- a read-only output ---------------------------------------------------------------------------
def _run_unprivileged(args) -> tuple[int, str]:
    """The CLI on ``args``, as a user without write permission where the test says so: as root
    (who may write anywhere) in a forked child that drops to nobody; else directly."""
    if os.geteuid() != 0:
        res = run_cli(args)
        return res.exit_code, res.output
    import pwd

    nobody = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no new import may be needed past this point (the site-packages may be root-only)
        os.close(r)
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            res = run_cli(args)
            msg = {"code": res.exit_code, "output": res.output}
        except BaseException as exc:  # noqa: BLE001 - report anything to the parent
            msg = {"code": -1, "output": f"{type(exc).__name__}: {exc}"}
        os.write(w, json.dumps(msg).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    msg = json.loads(b"".join(chunks))
    return msg["code"], msg["output"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """A folder every user can read and traverse (pytest's own tmp is root-only): a checkpoint, a
    steered one, a direction, a read-only folder ``ro`` (0555), a read-only empty output folder
    ``rw/ro-out`` in a writable folder, and a read-only earlier record ``rw/rec.json``."""
    import shutil
    import tempfile

    from steerformer.steering import save_steered, steer

    root = Path(tempfile.mkdtemp(prefix="steerformer-ro-"))
    make_model("gpt2", dtype=torch.float32).save_pretrained(root / "model")
    model = make_model("gpt2", dtype=torch.float32)
    steer(model, torch.ones(64, dtype=torch.float64), gain=0.5, solve="exact", report=False)
    save_steered(model, root / "steered")
    np.save(root / "u.npy", np.ones(64))
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    (root / "rw").mkdir()
    os.chmod(root / "rw", 0o777)
    for folder in (root / "ro", root / "rw" / "ro-out"):  # ro-out's parent is writable: replacing it would work
        folder.mkdir()
        os.chmod(folder, 0o555)
    (root / "rw" / "rec.json").write_text('{"format": "steerformer.steering/2"}')
    os.chmod(root / "rw" / "rec.json", 0o444)
    # every command once, writable, so that the unprivileged child imports nothing new
    warm = root / "warm"
    warm.mkdir()
    for name, args in _commands(root, lambda c: warm / c, warm / "rec.json").items():
        assert run_cli(args).exit_code == 0, name
    shutil.rmtree(warm)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _commands(root: Path, out, record: Path) -> dict[str, list]:
    """Each writing command, with its output ``out(command)`` (and ``record`` for --record)."""
    steer = ["steer", root / "model", "--direction", root / "u.npy", "--gain", "1", "--solve", "exact"]
    return {
        "steer": [*steer, "--out", out("steer")],
        "steer-record": [*steer, "--record", record],
        "unsteer": ["unsteer", root / "steered", "--out", out("unsteer")],
        "analyze": ["analyze", root / "model", "--spectra-only", "--no-plots", "--out", out("analyze")],
        "simulate": ["simulate", "fig13a", "--runs", "1", "--t1", "0.1", "--out", out("simulate")],
        "collapse": ["collapse", root / "model", "--passes", "1", "--n-prompts", "2", "--length", "4", "--no-decode",
                     "--out", out("collapse")],
    }


@pytest.mark.parametrize("where", ["inside-a-read-only-folder", "the-read-only-folder-itself"])
@pytest.mark.parametrize("command", ["steer", "steer-record", "unsteer", "analyze", "simulate", "collapse"])
def test_a_read_only_output_is_one_line_and_stays_as_it_was(shared, command, where) -> None:
    out = shared / "ro" / "out" if where == "inside-a-read-only-folder" else shared / "rw" / "ro-out"
    record = shared / "ro" / "rec.json" if where == "inside-a-read-only-folder" else shared / "rw" / "rec.json"
    watched = (shared / "ro", shared / "rw" / "ro-out", shared / "rw" / "rec.json")

    def state():
        return {p: (os.stat(p).st_mode, sorted(os.listdir(p)) if p.is_dir() else p.read_bytes()) for p in watched}

    before = state()
    code, output = _run_unprivileged(_commands(shared, lambda c: out, record)[command])
    assert code == 2 and "Traceback" not in output, output
    last = output.strip().splitlines()[-1]
    flag = "--record" if command == "steer-record" else "--out"
    assert last.startswith(f"error: {flag}=") and ("write permission" in last or "read-only" in last
                                                   or "permission denied" in last), last
    assert state() == before
