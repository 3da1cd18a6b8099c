"""Special files never hang a command and never fill memory: a FIFO, a device or a link to one,
named by the user (``--record``, ``plot-collapse --out``) or found in a checkpoint (``config.json``,
``model.safetensors`` under ``verify``/``unsteer``, ``state.pt`` under ``collapse --resume``), is one
line naming the file; the "is this our earlier output?" checks read only a bounded prefix; counts in
a config are bounded before transformers builds anything from them. Every CLI call runs in its own
process with a time limit, so a regression fails instead of hanging the suite; FIFOs are made with
``os.mkfifo`` and never opened by the test."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.cli_process import one_error_line, run_cli
from tests.models import make_model


@pytest.fixture(scope="module")
def steered(tmp_path_factory) -> tuple[Path, Path]:
    """(a tiny GPT-2 checkpoint, a steered copy of it)."""
    from steerformer.steering import steer_checkpoint

    root = tmp_path_factory.mktemp("sp")
    make_model("gpt2", dtype=torch.float32).save_pretrained(root / "model")
    steer_checkpoint(root / "model", root / "steered", eigvec=0, gain=1.0)
    return root / "model", root / "steered"


def _special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_a_special_record_file_is_refused(steered, tmp_path, kind) -> None:
    model, _ = steered
    _special(tmp_path / "r.json", kind)
    line = one_error_line(run_cli(["steer", model, "--eigvec", "0", "--gain", "1", "--out", tmp_path / "o",
                                   "--record", tmp_path / "r.json", "--overwrite"], timeout=240))
    assert "--record" in line and "regular file" in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
@pytest.mark.parametrize("file", ["model.safetensors", "config.json"])
@pytest.mark.parametrize("command", ["verify", "unsteer"])
def test_a_special_file_in_a_steered_checkpoint_is_one_line(steered, tmp_path, kind, file, command) -> None:
    _, s = steered
    d = tmp_path / "s"
    shutil.copytree(s, d)
    (d / file).unlink()
    _special(d / file, kind)
    args = [command, d] + (["--out", tmp_path / "u"] if command == "unsteer" else [])
    res = run_cli(args, timeout=240)
    text = res.stdout + res.stderr
    assert res.returncode in (1, 2) and "Traceback" not in text, text[-2000:]
    # named as what it is where it is read, or (unsteer's hash check of config.json) as not a saved file
    assert file in text and ("FIFO" in text or "device" in text or f"{file}: missing" in text), text[-2000:]
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize("command,kind", [("analyze", "fifo"), ("steer", "dev-zero-link")])
def test_a_checkpoint_config_that_is_special_is_named_as_what_it_is(steered, tmp_path, kind, command) -> None:
    """Not "has no config.json ... (found: config.json, ...)", which contradicts itself."""
    model, _ = steered
    d = tmp_path / "m"
    shutil.copytree(model, d)
    (d / "config.json").unlink()
    _special(d / "config.json", kind)
    args = {"analyze": ["analyze", d, "--spectra-only", "--out", tmp_path / "o"],
            "steer": ["steer", d, "--eigvec", "0", "--gain", "1", "--out", tmp_path / "o"]}[command]
    line = one_error_line(run_cli(args, timeout=240))
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert f"config.json is {what}" in line and "has no config.json" not in line, line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_a_special_figure_path_is_refused(tmp_path, kind) -> None:
    _special(tmp_path / "fig.png", kind)
    res = run_cli(["plot-collapse", tmp_path / "nothing", "--out", tmp_path / "fig.png"], timeout=240)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]


def test_a_special_state_file_under_resume_is_one_line(steered, tmp_path) -> None:
    model, _ = steered
    out = tmp_path / "c"
    res = run_cli(["collapse", model, "--out", out, "--n-prompts", "2", "--length", "8", "--passes", "1",
                   "--no-decode"], timeout=400)
    assert res.returncode == 0, res.stderr[-2000:]
    (out / "state.pt").unlink()
    os.mkfifo(out / "state.pt")
    res = run_cli(["collapse", model, "--out", out, "--n-prompts", "2", "--length", "8", "--passes", "2",
                   "--resume", "--no-decode"], timeout=400)
    line = one_error_line(res)
    assert "state.pt" in line, line


def test_the_own_output_checks_read_a_bounded_prefix(tmp_path) -> None:
    from steerformer.outputs import FIGURE, RECORD

    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # 300 MB of sparse file: a whole read would take it all into memory
        f.write(b'{"format": "other", "x": "')
        f.seek(300 << 20)
        f.write(b'"}')
    import tracemalloc

    tracemalloc.start()
    assert not RECORD.is_ours(big) and not FIGURE.is_ours(big)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20, peak
    own = tmp_path / "own.json"
    own.write_text(json.dumps({"x": 1, "format": "steerformer.steering-record"}, indent=2))
    assert RECORD.is_ours(own)
    os.mkfifo(tmp_path / "p.json")
    assert not RECORD.is_ours(tmp_path / "p.json") and not FIGURE.is_ours(tmp_path / "p.json")


@pytest.mark.parametrize("field", ["n_layer", "n_head"])
def test_a_huge_count_in_a_config_is_refused_before_transformers(steered, tmp_path, field) -> None:
    model, _ = steered
    d = tmp_path / "m"
    shutil.copytree(model, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg[field] = 10**12
    (d / "config.json").write_text(json.dumps(cfg))
    line = one_error_line(run_cli(["analyze", d, "--spectra-only", "--out", tmp_path / "a"], timeout=240))
    assert f"{field}=1000000000000" in line, line


def test_the_json_reader_refuses_special_files(tmp_path) -> None:
    from steerformer.errors import FileFormatError
    from steerformer.results import read_json

    os.mkfifo(tmp_path / "p.json")
    os.symlink("/dev/zero", tmp_path / "z.json")
    for f in ("p.json", "z.json"):
        with pytest.raises(FileFormatError, match="regular files"):
            read_json(tmp_path / f)
