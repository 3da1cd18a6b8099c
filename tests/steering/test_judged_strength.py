"""The judged strength search (steering/strength.py): the choice is the best judged aggregate within
the KL ceiling (ties: lower KL), each candidate's KL is the KL a plain hook gives on the probe, the
report questions are never run, and the same call gives the same dose curve. A tiny random GPT-2
with a character tokenizer, a hook as the method, and a stub judge whose ratings the test sets."""

from __future__ import annotations

import contextlib

import pytest
import torch

from steerformer.prompts import REPORT_QUESTIONS, SELECTION_QUESTIONS
from steerformer.steering import activation_steering
from steerformer.steering.methods.addition.calibrate import ContinuationProbe
from steerformer.steering.evaluation.judge import Rating
from steerformer.steering.evaluation.strength import StrengthSearch, judged_strength, kl_ladder
from steerformer.loading import open_source

from ..models import make_model
from .test_selection_split import CharTokenizer

LAYER = 1


@pytest.fixture(scope="module")
def setup():
    model = make_model("gpt2", dtype=torch.float32, n_layer=3, n_positions=256, vocab_size=131)
    g = torch.Generator().manual_seed(1)
    v = torch.randn(model.config.n_embd, generator=g, dtype=torch.float32)
    tok = CharTokenizer()
    probe = ContinuationProbe.of(model, open_source(model).adapter, tok, list(SELECTION_QUESTIONS[:3]), n_new=6)
    v = v / v.norm() * probe.residual_scale(LAYER)  # strength 1: one median residual norm
    return model, tok, v, probe


class Method:
    """A hook adding s·v after layer LAYER; remembers the last strength entered (the stub judge reads it)."""

    def __init__(self, model, v):
        self.model, self.v, self.last = model, v, None

    @contextlib.contextmanager
    def at(self, s):
        self.last = s
        with activation_steering(self.model, {LAYER: self.v}, coeff=s):
            yield


class StubJudge:
    """Rates every answer (a, a, a) with a = table[the strength last entered] (aggregate a), and the
    base answers (nothing entered yet) 0."""

    name = "stub"

    def __init__(self, method, table):
        self.method, self.table, self.calls = method, table, 0

    def __call__(self, items):
        self.calls += 1
        a = 0.0 if self.method.last is None else self.table[self.method.last]
        return [Rating(a, a, a) for _ in items]


def hook_kl(model, probe, v, s):
    """KL(base ‖ steered) per continuation token of the probe, by a forward hook written here that
    adds s·v to the output of block LAYER, and the closed form Σ p (log p − log q)."""
    block = model.transformer.h[LAYER]

    def add(m, args, out):
        if isinstance(out, tuple):
            return (out[0] + s * v,) + tuple(out[1:])
        return out + s * v

    with torch.no_grad():
        inputs = probe.batch.inputs()
        p = torch.log_softmax(model(**inputs).logits.double(), -1)[probe.select]
        h = block.register_forward_hook(add)
        try:
            q = torch.log_softmax(model(**inputs).logits.double(), -1)[probe.select]
        finally:
            h.remove()
    return float((p.exp() * (p - q)).sum(-1).mean())


def test_each_candidates_kl_is_the_kl_a_plain_hook_gives(setup) -> None:
    model, tok, v, probe = setup
    m = Method(model, v)
    strengths = [0.2, 1.0, 3.0]
    found = judged_strength(model, tok, m.at, "ocean", strengths, judge=StubJudge(m, dict.fromkeys(strengths, 1.0)),
                            max_kl=100.0, probe=probe, max_new_tokens=4, questions=SELECTION_QUESTIONS[:2])
    assert [p.strength for p in found.points] == strengths
    kls = [hook_kl(model, probe, v, s) for s in strengths]
    assert kls[0] > 1e-4 and kls[0] < kls[1] < kls[2]
    for p, kl in zip(found.points, kls):
        assert p.kl == pytest.approx(kl, rel=1e-5, abs=1e-7)


def test_the_choice_is_the_best_aggregate_within_the_ceiling_and_ties_go_to_lower_kl(setup) -> None:
    model, tok, v, probe = setup
    strengths = [0.2, 0.5, 1.0, 2.0, 4.0]
    kls = [hook_kl(model, probe, v, s) for s in strengths]
    ceiling = (kls[2] + kls[3]) / 2  # the first three are within
    m = Method(model, v)
    # the best overall (4.0) is over the ceiling; within it 0.5 and 1.0 tie: the lower KL wins
    table = {0.2: 0.4, 0.5: 1.2, 1.0: 1.2, 2.0: 1.9, 4.0: 2.0}
    found = judged_strength(model, tok, m.at, "ocean", strengths, judge=StubJudge(m, table), max_kl=ceiling,
                            probe=probe, max_new_tokens=4, questions=SELECTION_QUESTIONS[:2])
    assert [p.within for p in found.points] == [True, True, True, False, False]
    assert [p.aggregate for p in found.points] == pytest.approx([0.4, 1.2, 1.2, 1.9, 2.0])
    assert found.chosen == 1 and found.strength == 0.5 and found.best.kl <= ceiling
    d = found.to_dict()
    assert d["strength"] == 0.5 and d["chosen"] == 1 and d["max_kl"] == ceiling
    # below every candidate's KL: nothing is chosen, and it says so
    none = judged_strength(model, tok, m.at, "ocean", strengths, judge=StubJudge(m, table), max_kl=kls[0] / 2,
                           probe=probe, max_new_tokens=4, questions=SELECTION_QUESTIONS[:2])
    assert none.chosen is None and none.strength is None and "no candidate" in none.choice


def test_the_ladder_reaches_each_level_from_below(setup) -> None:
    model, tok, v, probe = setup
    m = Method(model, v)
    top = hook_kl(model, probe, v, 2.0)
    levels = [top / 8, top / 4, top / 2]
    ladder = kl_ladder(model, m.at, probe, levels, start=0.1, largest=2.0)
    assert [lvl for _, _, lvl in ladder] == levels
    for s, kl, lvl in ladder:
        assert 0.9 * lvl <= kl <= lvl
        assert kl == pytest.approx(hook_kl(model, probe, v, s), rel=1e-5)
    assert ladder[0][0] < ladder[1][0] < ladder[2][0]


def test_no_report_question_is_ever_run_and_the_search_is_deterministic(setup) -> None:
    model, tok, v, _ = setup
    m = Method(model, v)
    seen: list[str] = []
    hook = model.get_input_embeddings().register_forward_pre_hook(
        lambda mod, args: seen.extend(tok.decode(r) for r in args[0].tolist()))

    def run():
        # the default everything: its own probe, the default ladder, all selection questions
        return judged_strength(model, tok, m.at, "ocean", judge=StubJudge(m, _Graded()), max_kl=0.012, start=0.1,
                               levels=[0.004, 0.008], largest=4.0, max_new_tokens=3)
    try:
        first, second = run(), run()
    finally:
        hook.remove()
    leaked = [q for q in REPORT_QUESTIONS if any(q in s for s in seen)]
    assert not leaked, leaked
    assert all(any(q in s for s in seen) for q in SELECTION_QUESTIONS)  # every selection question was answered
    # the ladder's levels and the ceiling: 3 candidates, each within 10 % below its level
    assert [p.level for p in first.points] == [0.004, 0.008, 0.012]
    assert all(0.9 * p.level <= p.kl <= p.level for p in first.points)

    def strip(d):
        return {**d, "seconds": None, "points": [{**p, "seconds": None} for p in d["points"]]}
    assert strip(first.to_dict()) == strip(second.to_dict())


class _Graded(dict):
    """Any strength's rating: grows with the strength, capped at 2."""

    def __missing__(self, s):
        return min(2.0, 0.1 + s)


def test_a_report_question_is_refused(setup) -> None:
    model, tok, v, probe = setup
    m = Method(model, v)
    with pytest.raises(ValueError, match="report question"):
        judged_strength(model, tok, m.at, "ocean", [0.1], judge=StubJudge(m, {0.1: 1.0}), probe=probe,
                        questions=[SELECTION_QUESTIONS[0], REPORT_QUESTIONS[0]])


def test_the_dose_curve_round_trips(setup, tmp_path) -> None:
    model, tok, v, probe = setup
    m = Method(model, v)
    found = judged_strength(model, tok, m.at, "ocean", [0.05, 0.2], judge=StubJudge(m, {0.05: 0.5, 0.2: 1.0}),
                            probe=probe, max_new_tokens=3, questions=SELECTION_QUESTIONS[:2])
    written = found.save(tmp_path)
    assert {"json", "csv", "strength_curve"} <= written.keys()
    back = StrengthSearch.load(tmp_path)
    assert back.to_dict() == found.to_dict() and back.summary() == found.summary()
    assert set(found.to_dict()["points"][0]) == {"strength", "level", "kl", "concept", "relevance", "fluency",
                                                 "aggregate", "good", "n", "within", "answers", "ratings", "seconds"}
