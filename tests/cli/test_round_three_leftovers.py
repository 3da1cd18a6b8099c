"""Round three's leftovers, each one line: a `--text` too long for the model's positions (an
IndexError in the embedding before), a d = 1 model through the full `analyze` (NaN in the
statistics' eigenproblem before), a FIFO in place of a recorded file is named a FIFO (not
"missing"), and a bad value stored in a collapse run's `run.json` is named as that file's field,
not as the user's flag."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from ..conftest import run_cli
from ..models import make_model
from ..test_prompt_batch import _gpt2_like_tokenizer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("left") / "model"
    make_model("gpt2", dtype=torch.float32).save_pretrained(d)
    _gpt2_like_tokenizer().save_pretrained(d)
    return d


@pytest.mark.parametrize("method", [[], ["--gain", "1", "--solve", "exact"], ["--method", "ablation"]],
                         ids=["addition", "paper", "ablation"])
def test_a_text_longer_than_the_models_positions_is_one_line(tiny, tmp_path, method) -> None:
    """Every method reads --text through the one check of the model's positions (prompts.check_fits)."""
    res = run_cli(["steer", tiny, "--text", " ".join(["word"] * 10_000), *method, "--out", tmp_path / "o"])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --text='10000 words'") and "64 positions" in last, res.output
    assert not (tmp_path / "o").exists()


def test_prompts_longer_than_the_models_positions_are_one_line(tiny, tmp_path) -> None:
    (tmp_path / "p.txt").write_text("a cat\n" + "word " * 5000 + "\n")
    (tmp_path / "n.txt").write_text("a dog\nthe dog\n")
    res = run_cli(["direction", "make", tiny, "--positive", tmp_path / "p.txt", "--negative", tmp_path / "n.txt",
                   "--layers", "1", "--out", tmp_path / "d"])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: --positive=") and "64 positions" in last, res.output
    assert not (tmp_path / "d").exists()


def test_a_model_of_width_one_through_the_full_analyze_is_one_line(tmp_path) -> None:
    d = tmp_path / "d1"
    make_model("gpt2", dtype=torch.float32, n_embd=1, n_head=1).save_pretrained(d)
    res = run_cli(["analyze", d, "--out", tmp_path / "a"])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and "d_model >= 2" in last and "--spectra-only" in last, res.output
    assert run_cli(["analyze", d, "--spectra-only", "--out", tmp_path / "s"]).exit_code == 0


def test_a_fifo_in_place_of_a_recorded_file_is_named_a_fifo(tiny, tmp_path) -> None:
    from steerformer.steering import steer_checkpoint

    steered = tmp_path / "steered"
    steer_checkpoint(tiny, steered, eigvec=0, gain=1.0)
    (steered / "config.json").unlink()
    os.mkfifo(steered / "config.json")
    res = run_cli(["unsteer", steered, "--out", tmp_path / "u"])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and "config.json: a FIFO" in last and "missing" not in last, res.output
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize("field,value", [("e_precision", "bogus"), ("batch_size", 0), ("ffn", "x")])
def test_a_bad_value_in_run_json_is_named_as_the_files_field(tiny, tmp_path, field, value) -> None:
    args = ["collapse", tiny, "--passes", "2", "--n-prompts", "2", "--length", "4", "--no-decode", "--quiet"]
    run = tmp_path / "run"
    assert run_cli([*args, "--out", run]).exit_code == 0
    info = json.loads((run / "run.json").read_text())
    info["options"][field] = value
    (run / "run.json").write_text(json.dumps(info))
    before = sorted(p.name for p in run.iterdir())
    res = run_cli([*args, "--out", run, "--resume"])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and f"run.json has a bad options.{field}" in last, res.output
    assert "--" + field.replace("_", "-") not in last  # not the user's flag
    assert sorted(p.name for p in run.iterdir()) == before
    shutil.rmtree(run)
