"""A single output file (``steer --record``, ``plot-collapse --out``) follows the output rules: never
inside the input checkpoint or over an input file, never inside the command's --out folder, never
over a file steerformer did not write (``--overwrite`` replaces only an earlier record), written
through a temporary sibling moved into place — and refused before any model is loaded."""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import run_cli
from tests.models import make_model


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def proj(tmp_path, monkeypatch) -> Path:
    """proj/model (a checkpoint), proj/u.npy (a direction), proj/notes.txt (someone's file); cwd proj."""
    make_model("gpt2", dtype=torch.float32).save_pretrained(tmp_path / "model")
    np.save(tmp_path / "u.npy", np.ones(64))
    (tmp_path / "notes.txt").write_text("years of work")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _steer(proj: Path, *extra, gain: str = "1") -> list:
    return ["steer", proj / "model", "--direction", proj / "u.npy", "--gain", gain, "--solve", "exact", *extra]


@pytest.mark.parametrize("record, words", [
    ("model/model.safetensors", "inside the input checkpoint"),
    ("model/config.json", "inside the input checkpoint"),
    ("model/new.json", "inside the input checkpoint"),
    ("u.npy", "an input file of this command"),
    ("notes.txt", "not an earlier steer --record output"),
    ("out/record.json", "outside the output folder"),
], ids=["record-over-the-input-weights", "record-over-the-input-config", "record-new-file-inside-the-input",
        "record-over-the-direction-file", "record-over-an-unrelated-file", "record-inside-out"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["", "with-overwrite"])
def test_record_path_that_breaks_a_rule_is_refused_before_loading(proj, record, words, overwrite) -> None:
    before = _tree(proj)
    res = run_cli(_steer(proj, "--out", proj / "out", "--record", proj / record, *(["--overwrite"] if overwrite else [])))
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("error: --record=") and words in last, res.output
    assert "Loading weights" not in res.output  # refused before the model was loaded
    assert _tree(proj) == before  # input untouched, no --out, no temporary left behind


def test_own_record_is_replaced_only_with_overwrite_and_atomically(proj) -> None:
    rec = proj / "rec.json"
    assert run_cli(_steer(proj, "--record", rec)).exit_code == 0
    first = json.loads(rec.read_text())
    assert first["format"].startswith("steerformer.") and first["gain"] == 1.0
    res = run_cli(_steer(proj, "--record", rec, gain="2"))
    assert res.exit_code == 2 and "--overwrite" in res.output and json.loads(rec.read_text()) == first
    assert run_cli(_steer(proj, "--record", rec, "--overwrite", gain="2")).exit_code == 0
    assert json.loads(rec.read_text())["gain"] == 2.0
    assert sorted(p.name for p in proj.iterdir() if p.name.startswith(".")) == []  # no temporary left


def test_a_record_that_cannot_be_written_leaves_the_old_one(proj, monkeypatch) -> None:
    rec = proj / "rec.json"
    assert run_cli(_steer(proj, "--record", rec)).exit_code == 0
    before = rec.read_bytes()
    from steerformer.steering import SteeringRecord

    def full_disk(self, path=None):
        Path(path).write_text('{"format": "steerformer.ste')  # half of it, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(SteeringRecord, "to_json", full_disk)
    res = run_cli(_steer(proj, "--record", rec, "--overwrite"))
    assert res.exit_code == 2 and "no space left" in res.output and "--record=" in res.output, res.output
    assert rec.read_bytes() == before
    assert [p.name for p in proj.iterdir() if p.name.startswith(".")] == []


def test_lazy_steer_record_follows_the_rules_too(proj) -> None:
    res = run_cli(["steer", proj / "model", "--lazy", "--direction", proj / "u.npy", "--gain", "1", "--solve", "exact",
                "--out", proj / "out", "--record", proj / "model" / "config.json"])
    assert res.exit_code == 2 and "inside the input checkpoint" in res.output, res.output
    res = run_cli(["steer", proj / "model", "--lazy", "--direction", proj / "u.npy", "--gain", "1", "--solve", "exact",
                "--out", proj / "out", "--record", proj / "rec.json"])
    assert res.exit_code == 0, res.output
    assert json.loads((proj / "rec.json").read_text())["format"].startswith("steerformer.")


@pytest.fixture(scope="module")
def collapse_run(tmp_path_factory) -> Path:
    from steerformer.collapse import collapse

    out = tmp_path_factory.mktemp("runs") / "run"
    collapse(make_model("gpt2-base", dtype=torch.float32), n_prompts=2, length=4, passes=1, out=out)
    return out


def test_plot_collapse_never_replaces_a_foreign_file_but_replaces_its_own_figure(collapse_run, tmp_path) -> None:
    figure = tmp_path / "thesis.png"
    figure.write_bytes(b"\x89PNG not ours")
    res = run_cli(["plot-collapse", collapse_run, "--out", figure])
    assert res.exit_code == 2 and "not an earlier plot-collapse output" in res.output, res.output
    assert figure.read_bytes() == b"\x89PNG not ours"
    ours = tmp_path / "ours.pdf"
    for _ in range(2):  # the second run replaces the first one's figure, like analyze's report
        res = run_cli(["plot-collapse", collapse_run, "--out", ours])
        assert res.exit_code == 0 and ours.read_bytes()[:4] == b"%PDF", res.output


def test_plot_collapse_never_writes_into_a_run_it_reads(collapse_run) -> None:
    before = _tree(collapse_run)
    res = run_cli(["plot-collapse", collapse_run, "--out", collapse_run / "compare.png"])
    assert res.exit_code == 2 and "inside the input" in res.output, res.output
    assert _tree(collapse_run) == before
