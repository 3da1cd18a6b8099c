"""The strength of the distilled edit: a scale γ on the learned ΔW ("half-baked" to "over-baked",
Prompt Baking), chosen like AxBench chooses its steering factor — the best judged aggregate on the
SELECTION questions' answers among the strengths whose KL stays within a ceiling.

A small local search (one baseline, one set of answers per strength). The generic judged-strength
search (``steering/strength.py``) replaces it when it lands."""

from __future__ import annotations

from typing import Any, Sequence

from ....configs import progress_bar
from ....prompts import SELECTION_QUESTIONS
from ...activation import edits_applied
from ...edit import Edit
from ...evaluation.evaluate import Baseline, fluency_of, judge_point, score_answers
from ...evaluation.judge import concept_words, make_judge
from .training import scaled

#: answer length of the selection answers (the evaluation's default length)
SELECTION_TOKENS = 40


def choose_strength(model: Any, tokenizer: Any, edits: Sequence[Edit], concept: str, gains: Sequence[float], *,
                    kl_ceiling: float, judge: Any = "offline", max_new_tokens: int = SELECTION_TOKENS,
                    progress: Any = True) -> tuple[float, list[dict]]:
    """(the chosen strength, one row per strength tried: gain, KL, the judge's means, aggregate, good
    steers, concept rate). The choice: the best aggregate (then the smaller KL) with KL ≤ ``kl_ceiling``;
    when none fits, the strength with the smallest KL (the rows say so)."""
    judge = make_judge(judge)
    words = concept_words(concept)
    bar = progress_bar(progress, "distilled: strength on the selection questions", total=1 + len(gains))
    baseline = Baseline.of(model, tokenizer, list(SELECTION_QUESTIONS), max_new_tokens=max_new_tokens)
    bar.update(1)
    rows = []
    for g in gains:
        with edits_applied(model, scaled(edits, g)):
            point, ids = score_answers(model, tokenizer, baseline, words, method="distilled", strength=float(g))
        point.fluency, point.fluency_free = fluency_of(model, baseline, ids, point=point)  # the base model again
        if judge is not None:
            judge_point(point, baseline, concept, words, judge)
        rows.append({"gain": float(g), "kl": point.kl, "aggregate": point.aggregate, "good": point.good,
                     "concept": point.judge_concept, "relevance": point.judge_relevance,
                     "fluency": point.judge_fluency, "concept_rate": point.concept_rate,
                     "answers": point.answers[:3]})
        bar.set_postfix({"gain": f"{g:g}", "kl": f"{point.kl:.3f}", "aggregate": f"{point.aggregate or 0:.2f}"})
        bar.update(1)
    bar.close()
    within = [r for r in rows if r["kl"] <= kl_ceiling]
    if within:
        best = max(within, key=lambda r: ((r["aggregate"] or 0.0), (r["concept_rate"] or 0.0), -r["kl"]))
    else:
        best = min(rows, key=lambda r: r["kl"])
    for r in rows:
        r["chosen"] = r is best
        r["within_ceiling"] = r["kl"] <= kl_ceiling
    return best["gain"], rows


__all__ = ["SELECTION_TOKENS", "choose_strength"]
