"""How a steered generative model is judged (docs/math.md §5d): held-out chat prompts, the base
model's answers and the steered model's answers, five numbers and the judge's three ratings.

* concept rate — the share of answers that contain one of the concept's words (whole words, any
  case; default words: the direction's token and its simple forms, ``word_forms``);
* KL — the per-token KL(p_base ‖ p_steered) teacher-forced on the base model's own answers, in nats;
* distinct-2 — distinct word 2-grams ÷ all word 2-grams of the answers (repetition lowers it);
* fluency — the mean per-token NLL of the steered answers under the *base* model ÷ that of the base
  model's own answers (in context: after the question), and ``fluency_free`` the same scored after
  an empty user turn (whether the text is still text, whatever the topic);
* the judge's ratings (``judge.py``, AxBench's three axes, 0–2 each): mean concept, relevance and
  fluency ratings, the mean aggregate (harmonic mean of the three per answer) and the share of
  good steers (all three ≥ 1). ``judge="offline"`` (default; the bundled MiniLM), an http(s) URL
  of an OpenAI-compatible server, any callable judge, or None / "none" (not judged).

Prompts go through the tokenizer's chat template (``chat=None``: when it has one; ``chat=True``
without one is refused in one line). Answers are greedy unless ``sample=True`` (seeded).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Sequence

import torch

from ...errors import InvalidArgumentError, bad_argument
from ...prompts import (  # noqa: F401  (the prompt sets and the split: public here too)
    HELDOUT_QUESTIONS, PROBE_QUESTIONS, REPORT_QUESTIONS, SELECTION_QUESTIONS, SPLITS, PromptBatch,
)
from ..chat import chat_rows, generate_answers, has_chat_template, pad_id, stop_ids, word_forms  # noqa: F401
from .judge import (  # noqa: F401
    JudgeItem, Rating, concept_words, judge_answers, make_judge, mentions, rated_text, summarize,
)
from ..probe import AnswerBatch, kl_per_token, model_device


# ---- words (word_forms: chat.py; concept_words, mentions, concept_words, mentions: judge.py) ---------------------------------------
def distinct2(texts: Sequence[str]) -> float:
    """Distinct word 2-grams ÷ all word 2-grams over ``texts`` (punctuation marks count as words)."""
    grams: set = set()
    total = 0
    for t in texts:
        w = re.findall(r"\w+|[^\w\s]", t.lower())
        pairs = list(zip(w, w[1:]))
        grams.update(pairs)
        total += len(pairs)
    return len(grams) / total if total else 0.0


# ---- prompts and answers ------------------------------------------------------------------------
def answer_logprobs(model: Any, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], *,
                    batch_size: int = 8) -> list[torch.Tensor]:
    """log p(· | prompt, answer[:t]) at each answer position t, teacher-forced: one (len(answer),
    vocab) float64 tensor per answer (the probe room's answer batches, ``batch_size`` rows a pass)."""
    out: list[torch.Tensor] = []
    dev = model_device(model)
    for start in range(0, len(prompts), batch_size):
        rows = AnswerBatch.of(prompts[start:start + batch_size], answers[start:start + batch_size], device=dev)
        out += rows.per_answer(rows.logprobs(model))
    return out


def mean_nll(logprobs: Sequence[torch.Tensor], answers: Sequence[Sequence[int]]) -> float:
    total, n = 0.0, 0
    for lp, a in zip(logprobs, answers):
        if len(a):
            total -= float(lp[torch.arange(len(a)), torch.as_tensor(list(a))].sum())
            n += len(a)
    return total / n if n else float("nan")


def answer_nlls(logprobs: Sequence[torch.Tensor], answers: Sequence[Sequence[int]]) -> list[float]:
    """The mean per-token NLL of each answer (NaN for an empty one)."""
    return [float(-lp[torch.arange(len(a)), torch.as_tensor(list(a))].sum()) / len(a) if len(a) else float("nan")
            for lp, a in zip(logprobs, answers)]


def mean_kl(base: Sequence[torch.Tensor], steered: Sequence[torch.Tensor]) -> float:
    """Mean over tokens of KL(p_base ‖ p_steered), nats."""
    total, n = 0.0, 0
    for b, s in zip(base, steered):
        if len(b):
            total += float(kl_per_token(b, s).sum())
            n += b.shape[0]
    return total / n if n else float("nan")


# ---- the baseline and one measurement ------------------------------------------------------------
@dataclasses.dataclass
class Baseline:
    """The base model's answers on the held-out questions and their scores (computed once)."""

    questions: list[str]
    prompts: list[list[int]]
    free_prompts: list[list[int]]  # the same turn with an empty question: fluency without context
    answers: list[list[int]]
    texts: list[str]
    logprobs: list[torch.Tensor]
    nll: float
    nll_free: float
    chat: bool
    max_new_tokens: int
    sample: bool
    seed: int
    nll_free_each: list[float] = dataclasses.field(default_factory=list)  # per base answer, after an empty turn
    nll_each: list[float] = dataclasses.field(default_factory=list)  # per base answer, after its question

    @classmethod
    def of(cls, model: Any, tokenizer: Any, questions: Sequence[str] | None = None, *, chat: bool | None = None,
           max_new_tokens: int = 40, sample: bool = False, seed: int = 0) -> "Baseline":
        questions = list(HELDOUT_QUESTIONS if questions is None else questions)
        prompts = chat_rows(tokenizer, questions, chat=chat)
        use_chat = has_chat_template(tokenizer) if chat is None else bool(chat)
        free = chat_rows(tokenizer, [""] * len(questions), chat=use_chat) if use_chat else \
            [list(p[:1]) or [pad_id(tokenizer)] for p in prompts]
        answers = generate_answers(model, tokenizer, prompts, max_new_tokens=max_new_tokens, sample=sample, seed=seed)
        lp = answer_logprobs(model, prompts, answers)
        lp_free = answer_logprobs(model, free, answers)
        return cls(questions=questions, prompts=prompts, free_prompts=free, answers=answers,
                   texts=[tokenizer.decode(a, skip_special_tokens=True) for a in answers], logprobs=lp,
                   nll=mean_nll(lp, answers), nll_free=mean_nll(lp_free, answers),
                   chat=use_chat, max_new_tokens=int(max_new_tokens), sample=bool(sample), seed=int(seed),
                   nll_free_each=answer_nlls(lp_free, answers), nll_each=answer_nlls(lp, answers))


@dataclasses.dataclass
class AnswerScore:
    """One steered model measured against a :class:`Baseline` (docs/math.md §5d)."""

    method: str
    strength: float | None
    concept_rate: float
    kl: float
    distinct2: float
    fluency: float  # NLL of the steered answers under the base model ÷ the base answers' NLL
    fluency_free: float  # the same, both scored after an empty user turn
    n_answers: int
    answers: list[str]
    seconds: float
    info: dict = dataclasses.field(default_factory=dict)  # e.g. layer, gain, coefficient
    # the judge's ratings (judge.py), None when not judged: means over the answers, 0–2
    judge_concept: float | None = None
    judge_relevance: float | None = None
    judge_fluency: float | None = None
    aggregate: float | None = None  # mean of the per-answer harmonic means
    good: float | None = None  # share of answers rated >= 1 on all three axes
    ratings: list = dataclasses.field(default_factory=list)  # per answer [concept, relevance, fluency]; None: not rated
    unrated: int = 0  # answers the judge left without a rating on some axis (reported, never counted as 0)
    nll_free_each: list = dataclasses.field(default_factory=list)  # per answer, under the base model
    nll_each: list = dataclasses.field(default_factory=list)  # the same after the question

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "AnswerScore":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@torch.no_grad()
def score_answers(model: Any, tokenizer: Any, baseline: Baseline, words: Sequence[str], *, method: str = "steered",
                  strength: float | None = None, info: dict | None = None) -> tuple[AnswerScore, list[list[int]]]:
    """Measure ``model`` as it is now (steered by an edit or inside a hook's ``with``) against the
    unsteered ``baseline``: KL on the base answers, then its own answers and their scores; returns
    the score (fluency still NaN: it needs the base model, :func:`fluency_of`) and the answer ids."""
    t0 = time.perf_counter()
    kl = mean_kl(baseline.logprobs, answer_logprobs(model, baseline.prompts, baseline.answers))
    answers = generate_answers(model, tokenizer, baseline.prompts, max_new_tokens=baseline.max_new_tokens,
                               sample=baseline.sample, seed=baseline.seed)
    texts = [tokenizer.decode(a, skip_special_tokens=True) for a in answers]
    seconds = time.perf_counter() - t0
    return AnswerScore(method=method, strength=strength, concept_rate=sum(mentions(texts, words)) / len(texts),
                       kl=kl, distinct2=distinct2(texts), fluency=float("nan"), fluency_free=float("nan"),
                       n_answers=len(texts), answers=texts, seconds=seconds, info=dict(info or {})), answers


def fluency_of(model: Any, baseline: Baseline, answers: Sequence[Sequence[int]], *,
               point: AnswerScore | None = None) -> tuple[float, float]:
    """(fluency, fluency_free) of ``answers`` under ``model`` (the base model: call it unsteered);
    ``point``: also store each answer's NLL after its question and after an empty user turn there
    (what the judge's fluency reads)."""
    lp = answer_logprobs(model, baseline.prompts, answers)
    lp_free = answer_logprobs(model, baseline.free_prompts, answers)
    if point is not None:
        point.nll_free_each = answer_nlls(lp_free, answers)
        point.nll_each = answer_nlls(lp, answers)
    return mean_nll(lp, answers) / baseline.nll, mean_nll(lp_free, answers) / baseline.nll_free


def concept_description(concept: str | Sequence[str]) -> str:
    """What the judge compares answers with: the word or phrase, or a list's words joined."""
    return concept if isinstance(concept, str) else ", ".join(str(c) for c in concept)


def judge_items(baseline: Baseline, texts: Sequence[str], concept: str | Sequence[str], words: Sequence[str],
                nll_free_each: Sequence[float] | None = None, nll_each: Sequence[float] | None = None
                ) -> list[JudgeItem]:
    """One :class:`~.judge.JudgeItem` per answer (question, base answer, and the answers' NLLs under the
    base model after an empty turn and after the question, where given, beside the base answers')."""
    def each(values: Sequence[float] | None, base: float) -> list:
        values = list(values or [])
        ok = math.isfinite(base)
        return [values[i] if ok and i < len(values) and math.isfinite(values[i]) else None for i in range(len(texts))]

    free, ctx = each(nll_free_each, baseline.nll_free), each(nll_each, baseline.nll)
    return [JudgeItem(question=q, answer=a, concept=concept_description(concept), terms=tuple(words),
                      base_answer=b, nll_free=free[i], base_nll_free=baseline.nll_free if free[i] is not None else None,
                      nll=ctx[i], base_nll=baseline.nll if ctx[i] is not None else None)
            for i, (q, a, b) in enumerate(zip(baseline.questions, texts, baseline.texts))]


def judge_point(point: AnswerScore, baseline: Baseline, concept: str | Sequence[str], words: Sequence[str],
                judge: Any) -> list[Rating]:
    """Rate ``point``'s answers with ``judge`` and store the means, the aggregate and good steers."""
    ratings = judge_answers(judge_items(baseline, point.answers, concept, words, point.nll_free_each, point.nll_each),
                            judge)
    s = summarize(ratings)
    point.judge_concept, point.judge_relevance, point.judge_fluency = s["concept"], s["relevance"], s["fluency"]
    point.aggregate, point.good, point.unrated = s["aggregate"], s["good"], s["unrated"]
    point.ratings = [[r.concept, r.relevance, r.fluency] for r in ratings]
    return ratings


# ---- the result ----------------------------------------------------------------------------------
CSV_FIELDS = ("method", "strength", "concept_rate", "kl", "distinct2", "fluency", "fluency_free", "judge_concept",
              "judge_relevance", "judge_fluency", "aggregate", "good", "unrated", "n_answers", "seconds")


@dataclasses.dataclass
class SteeringEvaluation:
    """A steering method (or several) judged on held-out answers: one :class:`AnswerScore` per
    (method, strength), the base model's answers and rates. Speaks the result protocol."""

    model_id: str
    words: list[str]
    questions: list[str]
    base_answers: list[str]
    base_concept_rate: float
    base_distinct2: float
    base_nll: float
    points: list[AnswerScore]
    chat: bool
    sample: bool
    seed: int
    max_new_tokens: int
    info: dict = dataclasses.field(default_factory=dict)
    judge: str | None = None  # who rated the answers ("offline", a URL, a callable's name); None: not judged
    base_judged: dict = dataclasses.field(default_factory=dict)  # the base answers' ratings (judge.summarize)

    def to_dict(self) -> dict:
        from ...version import __version__
        from ...results import VERSION_KEY

        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "points"}
        d["points"] = [p.to_dict() for p in self.points]
        d[VERSION_KEY] = __version__
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "SteeringEvaluation":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["points"] = [AnswerScore.from_dict(p) for p in d.get("points") or []]
        return cls(**kw)

    def to_json(self, path: str | Path | None = None) -> str:
        from ...results import json_text

        return json_text(self.to_dict(), path)

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_FIELDS + ("info",))
        for p in self.points:
            w.writerow([getattr(p, f) for f in CSV_FIELDS] + [";".join(f"{k}={v}" for k, v in p.info.items())])
        return buf.getvalue()

    def save(self, out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """``evaluation.json``, ``evaluation.csv`` and (``plots``) ``evaluation_curve.png``."""
        from ...results import save_table

        return save_table(self, out_dir, "evaluation", plots=plots)

    @classmethod
    def load(cls, out_dir: str | Path) -> "SteeringEvaluation":
        from ...results import read_json

        return cls.from_dict(read_json(Path(out_dir) / "evaluation.json"))

    def lines(self) -> dict[str, list[AnswerScore]]:
        """The points by method label, each line sorted by KL."""
        labels = dict.fromkeys(p.method for p in self.points)
        return {k: sorted((p for p in self.points if p.method == k), key=lambda p: p.kl) for k in labels}

    def plot(self, out_dir: str | Path) -> list[Path]:
        """Concept rate, fluency and (when judged) the judge's aggregate and good-steer share against
        KL, one line per method/layer → ``evaluation_curve.png``."""
        from matplotlib.figure import Figure

        from ...results import save_figure

        if not self.points:
            return []
        judged = any(p.aggregate is not None for p in self.points)
        fig = Figure(figsize=(15 if judged else 10, 4))
        ax_rate, ax_flu = fig.add_subplot(1, 3 if judged else 2, 1), fig.add_subplot(1, 3 if judged else 2, 2)
        ax_judge = fig.add_subplot(1, 3, 3) if judged else None
        for label, pts in self.lines().items():
            kl = [max(p.kl, 1e-4) for p in pts]
            ax_rate.plot(kl, [p.concept_rate for p in pts], "o-", ms=3, label=label)
            line = ax_flu.plot(kl, [p.fluency for p in pts], "o-", ms=3, label=label)
            if ax_judge is not None:
                color = line[0].get_color()
                ax_judge.plot(kl, [math.nan if p.aggregate is None else p.aggregate for p in pts], "o-", ms=3,
                              color=color, label=f"{label}: aggregate")
                ax_judge.plot(kl, [math.nan if p.good is None else p.good for p in pts], "s--", ms=3, color=color,
                              alpha=0.6, label=f"{label}: good steers")
        ax_rate.axhline(self.base_concept_rate, color="k", lw=0.8, ls=":", label="base model")
        ax_flu.axhline(1.5, color="r", lw=0.8, ls=":", label="fluency bar 1.5")
        axes = [(ax_rate, "concept rate (share of answers)"), (ax_flu, "fluency (NLL under base ÷ base answers' NLL)")]
        if ax_judge is not None:
            axes.append((ax_judge, f"judge ({self.judge}): mean aggregate (0–2), good-steer share"))
        for ax, ylabel in axes:
            ax.set_xscale("log")
            ax.set_xlabel("KL(base ‖ steered), nats/token, teacher-forced")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
        fig.suptitle(f"{self.model_id}: steering toward {', '.join(self.words)} "
                     f"({len(self.questions)} held-out {'chat ' if self.chat else ''}prompts)", fontsize=9)
        return [save_figure(fig, Path(out_dir) / "evaluation_curve.png")]

    def best(self, max_kl: float | None = None) -> AnswerScore | None:
        """The point with the highest concept rate (KL ≤ ``max_kl`` when given); ties: lower KL."""
        pts = [p for p in self.points if max_kl is None or p.kl <= max_kl]
        return max(pts, key=lambda p: (p.concept_rate, -p.kl)) if pts else None

    def summary(self) -> str:
        lines = [f"{self.model_id}: concept {self.words}; base rate {self.base_concept_rate:.2f}, "
                 f"distinct-2 {self.base_distinct2:.2f} on {len(self.questions)} held-out prompts "
                 f"({'sampled, seed ' + str(self.seed) if self.sample else 'greedy'})"]
        if self.base_judged:
            b = self.base_judged
            lines.append(f"  judge {self.judge}: base answers concept {rated_text(b['concept'])}, "
                         f"relevance {rated_text(b['relevance'])}, fluency {rated_text(b['fluency'])} (each 0-2)"
                         + unrated_text(b.get("unrated", 0), b.get("n", 0)))
        for p in self.points:
            s = "" if p.strength is None else f" strength {p.strength:.4g}"
            judged = (f"; judged: concept {rated_text(p.judge_concept)}, relevance {rated_text(p.judge_relevance)}, "
                      f"fluency {rated_text(p.judge_fluency)}, aggregate {rated_text(p.aggregate)}, good steers "
                      f"{rated_text(p.good)}{unrated_text(p.unrated, p.n_answers)}"
                      if p.aggregate is not None else "")
            lines.append(f"  {p.method}{s}: rate {p.concept_rate:.2f}, KL {p.kl:.3f}, distinct-2 {p.distinct2:.2f}, "
                         f"fluency {p.fluency:.2f} (free {p.fluency_free:.2f}){judged}")
        return "\n".join(lines)


def unrated_text(unrated: int, n: int) -> str:
    """What a summary says about answers the judge left without a rating (nothing when there are none)."""
    return f" ({unrated} of {n} answers not rated: the judge's reply held no rating)" if unrated else ""


def check_generates(model: Any, name: str = "model", value: Any = None) -> None:
    """Evaluation judges generated answers: a model without a next-token head (an encoder such as
    BERT or MiniLM, a base model loaded without its LM head) is refused in one line, before anything
    runs (it used to be ``AttributeError: 'BertModel' object has no attribute 'generate'``).
    ``value``: what the user passed (default the model's name)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if callable(getattr(model, "generate", None)) and head is not None:
        return
    shown = value if value is not None else \
        getattr(getattr(model, "config", None), "_name_or_path", None) or type(model).__name__
    raise bad_argument(name, shown, f"a causal language model that generates answers ({type(model).__name__} has no "
                       "next-token head to generate with)", "Evaluate a chat or causal LM, e.g. smollm2.")


def evaluate_steering(model: Any, tokenizer: Any, methods: Mapping[str, Callable[[Any], ContextManager]],
                      strengths: Sequence[Any] | Mapping[str, Sequence[Any]] = (None,), *,
                      concept: str | Sequence[str], questions: Sequence[str] | None = None, chat: bool | None = None,
                      max_new_tokens: int = 40, sample: bool = False, seed: int = 0,
                      baseline: Baseline | None = None, info: Mapping[str, Callable[[Any], dict]] | None = None,
                      judge: Any = "offline") -> SteeringEvaluation:
    """Judge steering methods on held-out answers (docs/math.md §5d).

    ``methods`` maps a label (one line of the curve: a method and its layer) to a function of a
    strength returning a context manager that steers ``model`` inside its ``with`` (an
    ``activation_steering`` hook, ``steered(...)``, any edit applied on entry and removed on exit);
    ``strengths``: the values tried, the same for every method or per label (``None``: the method's
    own default, e.g. the calibrated ``steer``). ``concept``: a word (its simple forms count), a
    phrase, or a list of words. ``baseline``: the base model's answers, when already computed
    (:meth:`Baseline.of`). ``info``: per label, extra columns of a point (e.g. the gain chosen).
    Fluency is scored after each ``with`` has closed, under the base model. ``judge``: who rates
    each answer 0–2 on concept, relevance and fluency (module docstring; None: nobody).
    """
    check_generates(model)
    from ...loading import open_source

    words = concept_words(concept)
    if not methods:
        raise bad_argument("methods", methods, "at least one label -> (strength -> context manager)")
    judge = make_judge(judge)  # a bad spec is refused before any model runs
    if baseline is None:
        baseline = Baseline.of(model, tokenizer, questions, chat=chat, max_new_tokens=max_new_tokens,
                               sample=sample, seed=seed)
    points = []
    for label, make in methods.items():
        for s in strengths[label] if isinstance(strengths, Mapping) else strengths:
            with make(s) as handle:
                point, ids = score_answers(model, tokenizer, baseline, words, method=label,
                                           strength=None if s is None else float(s))
                if info and label in info:
                    point.info.update(info[label](handle))
            point.fluency, point.fluency_free = fluency_of(model, baseline, ids, point=point)  # the base model again
            if judge is not None:
                judge_point(point, baseline, concept, words, judge)
            points.append(point)
    return evaluation_of(model_id=open_source(model).model_id, baseline=baseline, words=words, points=points,
                         concept=concept, judge=judge)


def evaluation_of(*, model_id: str, baseline: Baseline, words: Sequence[str], points: Sequence[AnswerScore],
                  concept: str | Sequence[str] | None = None, judge: Any = None) -> SteeringEvaluation:
    """The :class:`SteeringEvaluation` of ``points`` measured against ``baseline`` (``judge``: also
    rate the base answers, the reference of the points' ratings)."""
    base_judged, name = {}, None
    if judge is not None:
        name = getattr(judge, "endpoint", None) or getattr(judge, "name", None) or type(judge).__name__
        items = judge_items(baseline, baseline.texts, words if concept is None else concept, words,
                            baseline.nll_free_each, baseline.nll_each)
        ratings = judge_answers(items, judge)
        base_judged = {**summarize(ratings), "ratings": [[r.concept, r.relevance, r.fluency] for r in ratings]}
    return SteeringEvaluation(
        model_id=model_id, words=list(words), questions=baseline.questions, base_answers=baseline.texts,
        base_concept_rate=sum(mentions(baseline.texts, words)) / len(baseline.texts),
        base_distinct2=distinct2(baseline.texts), base_nll=baseline.nll, points=list(points), chat=baseline.chat,
        sample=baseline.sample, seed=baseline.seed, max_new_tokens=baseline.max_new_tokens,
        judge=name, base_judged=base_judged)


#: The strengths of a dose curve, as multiples of the chosen edit's gain: from zero (the base model)
#: through the steer (1) to twice its gain (the KL grows about as the square of the gain, so 1.5 and 2
#: lie past the KL budget the gain was chosen within).
DOSE_SCALES = (0.0, 0.5, 0.75, 1.0, 1.5, 2.0)


def dose_point(point: AnswerScore, scale: float, gain: float | None) -> dict:
    """One strength of a dose curve as the record stores it: the scale of the chosen gain, the gain,
    the numbers, each answer and its three ratings."""
    keep = ("kl", "concept_rate", "distinct2", "fluency", "fluency_free", "judge_concept", "judge_relevance",
            "judge_fluency", "aggregate", "good", "unrated", "answers", "ratings")
    return {"scale": float(scale), "gain": None if gain is None else gain * float(scale),
            **{k: getattr(point, k) for k in keep}}


def base_point(baseline: Baseline, words: Sequence[str], base_judged: Mapping) -> AnswerScore:
    """Strength zero of a dose curve: the base model's own answers (KL 0, fluency 1 by definition)."""
    texts = baseline.texts
    judged = dict(base_judged or {})
    return AnswerScore(method="base", strength=0.0, concept_rate=sum(mentions(texts, words)) / len(texts), kl=0.0,
                       distinct2=distinct2(texts), fluency=1.0, fluency_free=1.0, n_answers=len(texts),
                       answers=list(texts), seconds=0.0, judge_concept=judged.get("concept"),
                       judge_relevance=judged.get("relevance"), judge_fluency=judged.get("fluency"),
                       aggregate=judged.get("aggregate"), good=judged.get("good"),
                       ratings=list(judged.get("ratings") or []), unrated=int(judged.get("unrated") or 0))


def evaluate_record(model: Any, tokenizer: Any, record: Any, *, concept: str | Sequence[str] | None = None,
                    questions: Sequence[str] | None = None, chat: bool | None = None, max_new_tokens: int = 40,
                    sample: bool = False, seed: int = 0, judge: Any = "offline",
                    dose: Sequence[float] | None = None, progress: Callable[[str], None] | None = None
                    ) -> SteeringEvaluation:
    """Judge the last steering call of ``model`` (``record``, applied) on held-out answers, and store
    the result in ``record.evaluation`` (the record's JSON and the model card carry it). The base
    model's answers are taken with the record's edits removed (bit for bit) and put back.
    ``judge``: who rates the answers (module docstring; None: nobody).

    ``dose``: also answer the same questions at these multiples of the record's strength (each edit's
    gain and bias change scaled, e.g. :data:`DOSE_SCALES`; 0 is the base model, 1 the steer itself,
    neither run again) and store the curve in ``record.evaluation["dose"]`` (:func:`dose_point`, sorted
    by scale) and ``evaluation.info["dose"]``: what a report's strength slider shows. ``progress``:
    called with one line before each extra strength."""
    check_generates(model)
    if dose is not None:
        bad = [s for s in dose if not isinstance(s, (int, float)) or isinstance(s, bool) or not math.isfinite(s)
               or s < 0]
        if bad or not dose:
            raise bad_argument("dose", list(dose), "finite multiples >= 0 of the record's strength, e.g. "
                               f"{list(DOSE_SCALES)}")
        if not all(e.is_low_rank for e in record.edits):
            raise bad_argument("dose", list(dose), "None for a norm-preserving ablation (its row and column "
                               "scales have no strength to scale)")
    from ...loading import open_source
    from ..chain import steering_of

    steering = steering_of(model)
    if steering is None or not steering.records or steering.records[-1] is not record:
        raise InvalidArgumentError("evaluate_record judges the model's last steering call: pass the record that "
                                   "steer() just returned (and steer nothing else before evaluating).")
    if concept is None:  # the word or phrase the record steered toward (its token/text direction source)
        src = record.direction_source or {}
        concept = src.get("phrase") or src.get("token") or src.get("text")
    if concept is None:
        raise bad_argument("concept", None, "the words an answer must contain (the record's direction is no token "
                           "or text)", "Pass concept='word' (--concept).")
    words = concept_words(concept)
    judge = make_judge(judge)

    def without(fn):
        for e in reversed(record.edits):
            e.remove(model)
        try:
            return fn()
        finally:
            for e in record.edits:
                e.apply(model)

    baseline = without(lambda: Baseline.of(model, tokenizer, questions, chat=chat, max_new_tokens=max_new_tokens,
                                           sample=sample, seed=seed))
    point, ids = score_answers(model, tokenizer, baseline, words, method="steer")
    point.fluency, point.fluency_free = without(lambda: fluency_of(model, baseline, ids, point=point))
    if judge is not None:
        judge_point(point, baseline, concept, words, judge)
    ev = evaluation_of(model_id=open_source(model).model_id, baseline=baseline, words=words, points=[point],
                       concept=concept, judge=judge)
    record.evaluation = {**{k: v for k, v in point.to_dict().items() if k not in ("info", "nll_free_each", "nll_each")},
                         "words": words, "base_concept_rate": ev.base_concept_rate, "base_answers": baseline.texts,
                         "questions": baseline.questions, "sample": sample, "seed": seed, "judge": ev.judge,
                         "base_judged": ev.base_judged}
    if dose is not None:
        curve = []
        for scale in sorted(set(float(s) for s in dose) | {0.0, 1.0}):
            if scale == 0.0:
                at = base_point(baseline, words, ev.base_judged)
            elif scale == 1.0:
                at = point
            else:
                if progress is not None:
                    progress(f"  answering at {scale:g} x the strength ...")
                at = without(lambda: scaled_point(model, tokenizer, record, scale, baseline, words, concept, judge))
            curve.append(dose_point(at, scale, record.gain))
        record.evaluation["dose"] = ev.info["dose"] = curve
    return ev


def scaled_point(model: Any, tokenizer: Any, record: Any, scale: float, baseline: Baseline, words: Sequence[str],
                 concept: str | Sequence[str], judge: Any) -> AnswerScore:
    """The unsteered ``model`` answering with ``record``'s edits at ``scale`` × their strength
    (applied, measured, removed bit for bit), then scored under the base model and judged."""
    edits = [e.scaled(scale) for e in record.edits]
    for e in edits:
        e.apply(model, check=False)  # the recorded hashes are those of the unscaled chain
    try:
        at, ids = score_answers(model, tokenizer, baseline, words, method=f"steer x {scale:g}", strength=scale)
    finally:
        for e in reversed(edits):
            e.remove(model, check=False)
    at.fluency, at.fluency_free = fluency_of(model, baseline, ids, point=at)
    if judge is not None:
        judge_point(at, baseline, concept, words, judge)
    return at
