"""The dose curve of an evaluation (``evaluate_record(..., dose=...)``): the report answers at multiples
of the chosen strength. Strength 0 is the base model's answers, 1 the steer's, and 2 equals a model
whose weights were moved twice as far from the base by plain tensor arithmetic (the edit's effect
is linear in its gain and bias change); the model is left steered as it was, bit for bit, and the
report page offers one slider position per strength. A tiny GPT-2 (its MLP writer has a bias: the
bias change is scaled too) with a character tokenizer and a scripted judge."""

from __future__ import annotations

import contextlib

import pytest
import torch

import steerformer as sf
from steerformer.report import report_page
from steerformer.steering.common import tensor_sha256
from steerformer.steering.evaluation.evaluate import DOSE_SCALES, evaluate_record, evaluate_steering

from ..conftest import random_vector
from ..models import make_model
from .test_judged_evaluation import QUESTIONS, CharTokenizer, ScriptedJudge


def test_dose_runs_from_the_base_model_through_the_steer_to_twice_its_strength(tmp_path) -> None:
    model, tok = make_model("gpt2", dtype=torch.float32), CharTokenizer()
    rec = sf.steer(model, random_vector(64, seed=2), max_kl=0.5, layer=1, report=False)
    steered = {n: p.detach().to(torch.float64).clone() for n, p in model.named_parameters()}
    ev = evaluate_record(model, tok, rec, concept=["a", "b"], questions=QUESTIONS, max_new_tokens=5,
                         judge=ScriptedJudge(), dose=(2.0, 0.5))
    dose = rec.evaluation["dose"]
    assert [p["scale"] for p in dose] == [0.0, 0.5, 1.0, 2.0]  # 0 and 1 always, sorted
    assert dose[0]["answers"] == ev.base_answers and dose[0]["kl"] == 0.0
    assert dose[2]["answers"] == ev.points[0].answers and dose[2]["kl"] == ev.points[0].kl
    assert dose[3]["gain"] == pytest.approx(2 * rec.gain) and ev.info["dose"] == dose
    assert all(len(p["ratings"]) == len(QUESTIONS) for p in dose)  # each answer judged (base too)
    for e in rec.edits:  # the steer is in place again, bit for bit
        assert tensor_sha256(model.base_model.get_parameter(e.module)) == e.after_sha256
    kind, page = report_page(sf.save_steered(model, tmp_path / "steered"))  # one slider position per strength
    assert kind == "steer" and page.count('class="ans steered"') == len(QUESTIONS) * len(dose)

    sf.unsteer(model)
    base = {n: p.detach().to(torch.float64).clone() for n, p in model.named_parameters()}
    moved = [n for n in base if not torch.equal(base[n], steered[n])]
    assert moved  # the edit changed some tensor (a weight or the MLP output bias)

    @contextlib.contextmanager
    def twice(_):
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n in moved:
                params[n].copy_((base[n] + 2 * (steered[n] - base[n])).to(params[n].dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for n in moved:
                    params[n].copy_(base[n].to(params[n].dtype))

    ref = evaluate_steering(model, tok, {"twice": twice}, concept=["a", "b"], questions=QUESTIONS,
                            max_new_tokens=5, judge=None).points[0]
    assert dose[3]["answers"] == ref.answers
    assert dose[3]["kl"] == pytest.approx(ref.kl, rel=1e-4) and ref.kl > dose[2]["kl"] > 0


def test_dose_is_refused_for_a_bad_scale_before_any_answer() -> None:
    model, tok = make_model("gpt2", dtype=torch.float32), CharTokenizer()
    rec = sf.steer(model, random_vector(64, seed=2), max_kl=0.5, layer=1, report=False)
    with pytest.raises(sf.InvalidArgumentError, match="dose"):
        evaluate_record(model, tok, rec, concept="a", questions=QUESTIONS, dose=(-1.0,), judge=None)
    assert 0.0 in DOSE_SCALES and 1.0 in DOSE_SCALES and 5 <= len(DOSE_SCALES) <= 7 and max(DOSE_SCALES) > 1
