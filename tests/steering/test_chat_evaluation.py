"""The evaluation's pieces (docs/math.md §5d) against hand counts, its result protocol, and a chat prompt
with a tokenizer that has no chat template."""

from __future__ import annotations

import math

import pytest
import torch

from steerformer.errors import SteerformerError
from steerformer.steering.evaluation.evaluate import (
    AnswerScore, SteeringEvaluation, chat_rows, concept_words, distinct2, mean_kl, mentions, word_forms,
)


def test_word_forms_are_the_word_and_its_simple_plural_or_singular() -> None:
    assert word_forms("Ocean") == ["ocean", "oceans"]
    assert word_forms("berries") == ["berries", "berry"]
    assert word_forms("city") == ["cities", "city"]
    assert word_forms("box") == ["box", "boxes"]
    assert word_forms("ice cream") == ["ice cream", "ice creams"]  # a phrase is kept whole


def test_mentions_count_whole_words_in_any_case() -> None:
    words = concept_words("ocean")
    assert mentions(["The OCEAN is deep.", "oceanic trench", "Two oceans.", "no"], words) == [True, False, True, False]
    assert mentions(["I like Ice Cream a lot"], concept_words("ice cream")) == [True]


def test_distinct2_is_distinct_bigrams_over_all_bigrams() -> None:
    # "a b a b" -> (a,b) (b,a) (a,b): 2 distinct of 3; "c d" -> (c,d): 1 of 1
    assert distinct2(["a b a b", "c d"]) == pytest.approx(3 / 4)
    assert distinct2(["x"]) == 0.0


def test_mean_kl_is_the_per_token_average_of_kl() -> None:
    p = torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]], dtype=torch.float64), -1)
    q = torch.log_softmax(torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64), -1)
    by_hand = [sum(math.exp(a) * (a - b) for a, b in zip(pr.tolist(), qr.tolist())) for pr, qr in zip(p, q)]
    assert mean_kl([p[:1], p[1:]], [q[:1], q[1:]]) == pytest.approx(sum(by_hand) / 2, rel=1e-12)


class _NoTemplate:
    chat_template = None

    def __call__(self, texts):
        return {"input_ids": [[1, 2, 3] for _ in texts]}


def test_chat_prompt_with_a_tokenizer_without_template_is_one_line() -> None:
    with pytest.raises(SteerformerError, match="chat") as exc:
        chat_rows(_NoTemplate(), ["Hello?"], chat=True)
    assert "\n" not in str(exc.value) and "chat=False" in str(exc.value)
    assert chat_rows(_NoTemplate(), ["Hello?"]) == [[1, 2, 3]]  # chat=None: plain text without a template


def test_evaluation_round_trips_and_draws_one_line_per_method(tmp_path) -> None:
    pts = [AnswerScore(method=m, strength=s, concept_rate=r, kl=k, distinct2=0.6, fluency=1.2, fluency_free=1.1,
                       n_answers=4, answers=["a b"] * 4, seconds=1.0, info={"layer": 3})
           for m, s, r, k in (("hook, layer 3", 1.0, 0.25, 0.1), ("hook, layer 3", 2.0, 0.5, 0.3),
                              ("steer", None, 0.75, 0.2))]
    ev = SteeringEvaluation(model_id="m", words=["ocean", "oceans"], questions=["q"] * 4, base_answers=["x"] * 4,
                            base_concept_rate=0.0, base_distinct2=0.7, base_nll=1.0, points=pts, chat=True,
                            sample=False, seed=0, max_new_tokens=8)
    files = ev.save(tmp_path)
    assert {"json", "csv", "evaluation_curve"} <= set(files)
    back = SteeringEvaluation.load(tmp_path)
    assert back.to_dict() == ev.to_dict()
    assert list(back.lines()) == ["hook, layer 3", "steer"] and back.best().method == "steer"
    assert back.best(max_kl=0.15).strength == 1.0
    assert files["csv"].read_text().count("\n") == 4  # header + 3 points
