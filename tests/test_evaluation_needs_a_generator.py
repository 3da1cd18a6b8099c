"""Evaluation judges generated answers: an encoder (no next-token head) passed to ``evaluate``,
``steer --evaluate`` or the library is one line naming the model, before any work — it used to be
``AttributeError: 'BertModel' object has no attribute 'generate'``."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from steerformer.errors import InvalidArgumentError
from steerformer.steering.evaluation.evaluate import check_generates

from tests.models import make_model, saved_model


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("bert") / "bert", "bert")


@pytest.mark.parametrize("command", ["evaluate", "steer-evaluate"])
def test_an_encoder_passed_to_evaluation_is_one_line(bert, tmp_path, command) -> None:
    from steerformer_cli.main import app

    args = {"evaluate": ["evaluate", bert, "--token", "w1", "--layers", "1", "--out", tmp_path / "o"],
            "steer-evaluate": ["steer", bert, "--eigvec", "0", "--gain", "1", "--evaluate", "--concept", "w1",
                               "--out", tmp_path / "o"]}[command]
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "causal language model" in errors[0], res.output
    assert not (tmp_path / "o").exists()


def test_the_library_check() -> None:
    with pytest.raises(InvalidArgumentError, match="causal language model"):
        check_generates(make_model("bert", dtype=torch.float32))
    check_generates(make_model("gpt2", dtype=torch.float32))  # an LM passes


def test_answers_longer_than_the_model_positions_are_refused_in_one_line() -> None:
    """Prompt + answer past n_positions indexes GPT-2's position table out of range; the check comes
    before generating, names --max-new-tokens and says how many fit."""
    from steerformer.steering.chat import check_answer_fits, generate_answers

    model = make_model("gpt2", dtype=torch.float32)
    n = model.config.n_positions
    with pytest.raises(IndexError):  # what generation would hit: the position table ends at n
        model(torch.zeros((1, n + 1), dtype=torch.long))
    prompts = [[1] * 10, [1] * (n - 6)]
    with pytest.raises(InvalidArgumentError, match=rf"^max_new_tokens=7 is invalid: expected at most 6: the longest "
                                                   rf"prompt has {n - 6} tokens and the model embeds {n} positions"):
        check_answer_fits(model, prompts, 7)
    check_answer_fits(model, prompts, 6)  # exactly full: fits
    with pytest.raises(InvalidArgumentError, match="max_new_tokens=40 is invalid"):  # before any tokenizer is used
        generate_answers(model, None, prompts, max_new_tokens=40)
