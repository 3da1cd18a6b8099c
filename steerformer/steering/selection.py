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
SELECTION_ANSWERS = 4
SELECTION_TOKENS = 24


@torch.no_grad()
def judged_choice(model: Any, tokenizer: Any, candidates: Sequence[Sequence[Any]], concept: str, *,
                  judge: Any, questions: Sequence[str] | None = None, max_new_tokens: int = SELECTION_TOKENS,
                  ) -> dict:
    """Rate each candidate's answers to the selection questions (module docstring).

    Returns ``{"scores": [judge.summarize(...) per candidate], "best": index, "questions": [...],
    "max_new_tokens": n}``. The model is left as it was (each candidate removed bit for bit)."""
    from .evaluate import SELECTION_QUESTIONS, Baseline, answer_logprobs, answer_nlls, generate_answers, judge_items

    qs = list(SELECTION_QUESTIONS[:SELECTION_ANSWERS] if questions is None else questions)
    base = Baseline.of(model, tokenizer, qs, max_new_tokens=max_new_tokens)
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
    return {"scores": scores, "best": best, "questions": qs, "max_new_tokens": int(max_new_tokens)}
