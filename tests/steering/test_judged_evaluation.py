"""The evaluation carries the judge's ratings (docs/math.md §5d): each answer goes to the judge with its
question, base answer and NLL after an empty user turn (checked against the model's own forward),
the point stores the means, the aggregate and the good-steer share, and the CSV, summary, record
and model card show them. A tiny GPT-2 with a character tokenizer; a scripted judge."""

from __future__ import annotations

import contextlib
import csv
import io

import pytest
import torch

import steerformer as sf
from steerformer.steering.evaluation.evaluate import evaluate_steering
from steerformer.steering.evaluation.judge import Rating

from ..conftest import random_vector, run_cli
from ..models import make_model


class CharTokenizer:
    """Characters as ids 3… (0 pad, 1 end of sequence), no chat template."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = 1

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[3 + (ord(c) % 60) for c in t] for t in texts]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(97 + (i - 3) % 26) if i >= 3 else "" for i in ids)


class ScriptedJudge:
    """Rates answer i as SCRIPT[i % 3] and keeps what it was given."""

    SCRIPT = (Rating(2, 1, 1), Rating(0, 2, 2), Rating(1, 1, 2))

    def __init__(self) -> None:
        self.items = []

    def __call__(self, items):
        self.items.append(list(items))
        return [self.SCRIPT[i % 3] for i in range(len(items))]


QUESTIONS = ["How can I sleep?", "What should I pack?", "How do I cook rice?"]


def test_each_point_carries_the_judges_means_and_good_share(tmp_path) -> None:
    model, tok, judge = make_model("gpt2", dtype=torch.float32), CharTokenizer(), ScriptedJudge()
    ev = evaluate_steering(model, tok, {"none": lambda s: contextlib.nullcontext()}, concept="ocean",
                           questions=QUESTIONS, max_new_tokens=5, judge=judge)
    (point,) = ev.points
    # ratings (2,1,1), (0,2,2), (1,1,2): harmonic means 1.2, 0, 3/2.5; good: 2 of 3
    assert point.judge_concept == pytest.approx(1.0) and point.judge_relevance == pytest.approx(4 / 3)
    assert point.judge_fluency == pytest.approx(5 / 3)
    assert point.aggregate == pytest.approx((1.2 + 0.0 + 1.2) / 3) and point.good == pytest.approx(2 / 3)
    assert point.ratings == [[2.0, 1.0, 1.0], [0.0, 2.0, 2.0], [1.0, 1.0, 2.0]]
    assert ev.judge == "ScriptedJudge" and ev.base_judged["n"] == 3
    steered_items, base_items = judge.items  # the points first, then the base answers
    assert [it.question for it in steered_items] == QUESTIONS
    assert [it.base_answer for it in steered_items] == ev.base_answers
    assert all(it.concept == "ocean" and it.terms == ("ocean", "oceans") for it in steered_items)
    # the answer's NLL after an empty user turn, by one plain forward of the base model (no template:
    # the empty turn is the prompt's first token)
    it = steered_items[0]
    prompt = tok([QUESTIONS[0]])["input_ids"][0][:1]
    with torch.no_grad():
        out = model.generate(torch.tensor([tok([QUESTIONS[0]])["input_ids"][0]]), max_new_tokens=5, do_sample=False,
                             pad_token_id=0, eos_token_id=[1])
        answer = out[0, len(tok([QUESTIONS[0]])["input_ids"][0]):].tolist()
        answer = answer[:next((i for i, t in enumerate(answer) if t == 1), len(answer))]
        logits = model(torch.tensor([prompt + answer])).logits[0].double().log_softmax(-1)
    nll = -sum(float(logits[len(prompt) - 1 + t, a]) for t, a in enumerate(answer)) / len(answer)
    assert it.nll_free == pytest.approx(nll, rel=1e-6)
    text = ev.csv_text()
    row = next(csv.DictReader(io.StringIO(text)))
    assert float(row["aggregate"]) == pytest.approx(0.8) and float(row["good"]) == pytest.approx(2 / 3)
    assert "aggregate 0.80, good steers 0.67" in ev.summary()
    files = ev.save(tmp_path)  # the figure gets the judge's panel
    assert files["evaluation_curve"].is_file()


class HalfSilentJudge(ScriptedJudge):
    """Like ScriptedJudge, but the second answer gets no rating on relevance (a reply without one)."""

    SCRIPT = (Rating(2, 1, 1), Rating(0, None, 2), Rating(1, 1, 2))


def test_unrated_answers_are_counted_and_reported_never_scored_zero() -> None:
    model, tok = make_model("gpt2", dtype=torch.float32), CharTokenizer()
    ev = evaluate_steering(model, tok, {"none": lambda s: contextlib.nullcontext()}, concept="ocean",
                           questions=QUESTIONS, max_new_tokens=5, judge=HalfSilentJudge())
    (point,) = ev.points
    assert point.unrated == 1 and point.ratings[1] == [0.0, None, 2.0]
    assert point.judge_relevance == pytest.approx(1.0)  # (1 + 1) / 2: the missing one is not a 0
    assert point.aggregate == pytest.approx((1.2 + 1.2) / 2) and point.good == pytest.approx(1.0)
    assert ev.base_judged["unrated"] == 1
    assert "1 of 3 answers not rated" in ev.summary()
    row = next(csv.DictReader(io.StringIO(ev.csv_text())))
    assert row["unrated"] == "1"


def test_judge_none_leaves_the_ratings_empty() -> None:
    model, tok = make_model("gpt2", dtype=torch.float32), CharTokenizer()
    ev = evaluate_steering(model, tok, {"none": lambda s: contextlib.nullcontext()}, concept="ocean",
                           questions=QUESTIONS[:1], max_new_tokens=3, judge=None)
    assert ev.points[0].aggregate is None and ev.judge is None and ev.base_judged == {}
    assert "judged" not in ev.summary()


def test_record_and_model_card_show_the_judged_scores() -> None:
    from steerformer.steering.export import model_card

    model = make_model("gpt2")
    rec = sf.steer(model, random_vector(64, seed=2), max_kl=0.1, layer=1, report=False)
    rec.evaluation = {"n_answers": 8, "concept_rate": 0.625, "base_concept_rate": 0.0, "kl": 0.25, "distinct2": 0.6,
                      "fluency": 1.9, "judge_concept": 1.25, "judge_relevance": 1.5, "judge_fluency": 1.75,
                      "aggregate": 1.125, "good": 0.5, "judge": "offline"}
    text = str(model_card([rec], model=model))
    assert "concept 1.25, relevance 1.50, fluency 1.75; aggregate (harmonic mean) 1.12; good steers" in text
    assert "aggregate 1.12, good steers 0.50" in rec.summary()


def test_cli_bad_judge_exits_2_before_loading(tiny_checkpoint, tmp_path) -> None:
    res = run_cli(["evaluate", tiny_checkpoint, "--token", "x", "--out", tmp_path / "ev", "--judge", "gpt-4"])
    assert res.exit_code == 2 and "--judge" in res.output and "'gpt-4'" in res.output
    assert not (tmp_path / "ev").exists()
    res = run_cli(["steer", tiny_checkpoint, "--direction", tiny_checkpoint.parent / "u.npy", "--judge", "offline"])
    assert res.exit_code == 2 and "--judge" in res.output and "--evaluate" in res.output
