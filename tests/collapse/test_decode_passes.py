"""`collapse --passes N` decodes after at most N passes: the default loop counts stop at --passes,
and an explicit count above it is refused before any model is loaded."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from typer.testing import CliRunner

from steerformer.collapse import decode_loop_counts
from steerformer.errors import InvalidArgumentError
from steerformer_cli.main import app


@pytest.mark.parametrize("passes, expected", [(100, [1, 5, 10, 100]), (20, [1, 5, 10, 20]), (3, [1, 3]), (1, [1]),
                                              (250, [1, 5, 10, 100, 250])])
def test_default_loop_counts_stop_at_passes(passes, expected) -> None:
    assert decode_loop_counts(passes) == expected


def test_requested_loop_counts_above_passes_are_refused() -> None:
    assert decode_loop_counts(3, [2, 1]) == [2, 1]
    with pytest.raises(InvalidArgumentError, match=r"decode_passes='1,50' .*up to passes \(20\).*Drop 50"):
        decode_loop_counts(20, [1, 50])


def test_cli_decodes_only_up_to_passes(tmp_path) -> None:
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=64)).save_pretrained(
        tmp_path / "lm")
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["collapse", str(tmp_path / "lm"), "--passes", "6", "--n-prompts", "2",
                                   "--length", "6", "--decode-tokens", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    decoded = json.loads((out / "decode.json").read_text())
    assert sorted(map(int, decoded["continuations"])) == [1, 5, 6]
    assert decoded["options"]["passes"] == [1, 5, 6]


def test_cli_refuses_decode_passes_above_passes_before_loading(tmp_path) -> None:
    res = CliRunner().invoke(app, ["collapse", "nope/not-loaded", "--passes", "20", "--decode-passes", "1,100",
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    assert "--decode-passes='1,100'" in res.output and "--passes (20)" in res.output
    assert not (tmp_path / "run").exists()
