"""Choices made on held-out prompts (docs/math.md §5d, "Selection and report"): every automatic choice
of a steering call — the layer, the gain — is made on the *selection* questions and the numbers are
reported on the *report* questions (``evaluate.SPLITS``), as AxBench chooses its steering factor on
one half of the prompts and reports on the other.

* :func:`judged_choice` — each candidate edit (a list of :class:`~.edit.Edit`, e.g. one per layer
  of the scan, each already calibrated to the KL budget) applied in turn, short greedy answers to a
  few selection questions, rated by the judge (``judge.py``); the candidate with the highest mean
  aggregate wins (ties: more good steers, then the caller's order of preference).

Imports no steer/calibrate code: the KL-calibrated method calls it with its candidates.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .judge import concept_words, judge_answers, summarize

#: selection answers: a few questions, short answers (the choice must stay cheap)
SELECTION_ANSWERS = 6  # the KL probe's questions: their base answers are its continuations
SELECTION_TOKENS = 16


@torch.no_grad()
def selection_baseline(model: Any, tokenizer: Any, questions: Sequence[str], prompts: Sequence[Sequence[int]],
                       answers: Sequence[Sequence[int]]) -> Any:
    """An :class:`~.evaluate.Baseline` from answers the caller already has (the KL probe's greedy
    continuations of selection questions): the base answers' NLL after an empty user turn is the
    one forward pass it costs (no KL is measured against it: ``logprobs`` stays empty)."""
    from .evaluate import Baseline, answer_logprobs, answer_nlls, chat_rows, has_chat_template, mean_nll, pad_id

    prompts, answers = [list(p) for p in prompts], [list(a) for a in answers]
    chat = has_chat_template(tokenizer)
    free = chat_rows(tokenizer, [""] * len(prompts), chat=True) if chat else \
        [list(p[:1]) or [pad_id(tokenizer)] for p in prompts]
    lp_free = answer_logprobs(model, free, answers)
    return Baseline(questions=list(questions), prompts=prompts, free_prompts=free, answers=answers,
                    texts=[tokenizer.decode(a, skip_special_tokens=True) for a in answers], logprobs=[],
                    nll=float("nan"), nll_free=mean_nll(lp_free, answers), chat=chat,
                    max_new_tokens=max((len(a) for a in answers), default=0), sample=False, seed=0,
                    nll_free_each=answer_nlls(lp_free, answers))


@torch.no_grad()
def judged_choice(model: Any, tokenizer: Any, candidates: Sequence[Sequence[Any]], concept: str, *,
                  judge: Any, baseline: Any = None, max_new_tokens: int = SELECTION_TOKENS) -> dict:
    """Rate each candidate's answers to the selection questions (module docstring). ``baseline``: the
    base model's answers to them (:func:`selection_baseline`; default: generated for the first
    :data:`SELECTION_ANSWERS` selection questions).

    Returns ``{"scores": [judge.summarize(...) per candidate], "best": index, "questions": [...],
    "max_new_tokens": n}``. The model is left as it was (each candidate removed bit for bit)."""
    from .evaluate import SELECTION_QUESTIONS, Baseline, answer_logprobs, answer_nlls, generate_answers, judge_items

    base = baseline if baseline is not None else Baseline.of(
        model, tokenizer, SELECTION_QUESTIONS[:SELECTION_ANSWERS], max_new_tokens=max_new_tokens)
    words = concept_words(concept)
    scores = []
    for edits in candidates:
        for e in edits:
            e.apply(model, check=False)
        try:
            ids = generate_answers(model, tokenizer, base.prompts, max_new_tokens=max_new_tokens)
        finally:
            for e in reversed(edits):
                e.remove(model, check=False)
        texts = [tokenizer.decode(a, skip_special_tokens=True) for a in ids]
        nlls = answer_nlls(answer_logprobs(model, base.free_prompts, ids), ids)  # under the base model
        ratings = judge_answers(judge_items(base, texts, concept, words, nlls), judge)
        scores.append({**summarize(ratings), "answers": texts})
    best = max(range(len(scores)), key=lambda i: (round(scores[i]["aggregate"], 9), scores[i]["good"], -i))
    return {"scores": scores, "best": best, "questions": list(base.questions), "max_new_tokens": int(max_new_tokens)}
