"""The strength of a steering edit chosen by the judge (docs/math.md §5d, "Selection and report"), as
AxBench chooses its steering factor: every candidate strength answers the SELECTION questions
(``prompts.SPLITS["selection"]``), the judge rates the answers on concept, relevance and fluency, and
the candidate with the best mean aggregate (the per-answer harmonic mean of the three) whose KL is
within the ceiling ``max_kl`` wins; ties go to the lower KL. The REPORT questions are never run
(a question of the report split given here is refused).

Generic: any method with a strength plugs in with ``at``, a function of a strength returning a
context manager that steers the model inside its ``with`` (weights applied and removed, a hook)::

    from steerformer.steering import edits_applied
    from steerformer.steering import judged_strength

    found = judged_strength(model, tok, lambda g: edits_applied(model, scaled(edits, g)), "ocean")
    found.strength            # the chosen strength (None: no candidate within the ceiling)
    found.best                # its StrengthPoint (KL, ratings, answers)
    found.to_dict()           # the dose curve (keys below)

What is shared across the candidates, computed once: **the base generation** (``evaluate.Baseline``
of the selection questions: the base answers the judge compares relevance with, and their NLL after
an empty user turn that fluency is measured against) and **the probe** a candidate's KL is measured
on — by default the base generation itself (:func:`answer_probe`: KL(p_base ‖ p_steered) per token,
teacher-forced on the base answers, as the evaluation measures KL), or the method's own (the
addition passes its ``calibrate.ContinuationProbe``: the KL its budget bounds). One full forward of
the model as steered per candidate, so any edit counts (a hook, a weight, the embedding). Each
candidate then costs that forward, one batched greedy generation of the selection answers, one
forward for their NLL under the base model, and the judge.

The candidates: ``strengths`` as given, or (default) the ladder :func:`kl_ladder` — the strengths
whose probe KL reaches each level of :data:`KL_LEVELS` up to the ceiling (secant steps of
``algebra.search_gain``, every KL measured once and reused across levels).

Public API:

    DEFAULT_CEILING                 0.6 nats/token: the default ceiling ``max_kl`` of a judged choice
    KL_LEVELS                       (0.15, 0.3, 0.45, 0.6): the default ladder of KL levels
    SELECTION_TOKENS                40: greedy answer length of the selection answers (as the report's)
    answer_probe(baseline)          the default probe (a ``probe.KLProbe``): the base answers, teacher-forced;
                                    ``probe.kl_of(model)`` is the KL of the model as it is now (one full forward)
    kl_ladder(model, at, probe, levels, *, start=1.0, smallest=1e-3, largest=64.0, memo=None)
                                    [(strength, kl, level), ...] reaching each level (levels that no
                                    strength in [smallest, largest] reaches within 10 % are left out)
    judged_strength(model, tokenizer, at, concept, strengths=None, *, levels=None, max_kl=0.6,
                    judge=None, questions=None, probe=None, baseline=None, max_new_tokens=40,
                    start=1.0, smallest=1e-3, largest=64.0, progress=False) -> StrengthSearch
    StrengthPoint                   one candidate: strength, KL, the judged means, answers
    StrengthSearch                  the dose curve and the choice; a result type (to_dict, to_json,
                                    save, load, plot, summary)

``StrengthSearch.to_dict()`` — plain JSON data, keys stable (the HTML report renders them):

    concept         the concept's word, phrase or description the judge rated
    max_kl          the KL ceiling, nats/token
    chosen          index into ``points`` of the chosen candidate, or null (none within the ceiling)
    strength        the chosen strength, or null
    choice          one sentence: how the choice was made
    points          the dose curve, by increasing strength; each point:
                      strength   the candidate (the method's own unit: a gain factor, α, a coefficient)
                      level      the ladder's KL level it was searched for (null: given by the caller)
                      kl         KL(base ‖ steered) per token on the probe, nats
                      concept, relevance, fluency   mean ratings over the answers, each 0–2
                      aggregate  mean over the answers of the harmonic mean of the three (0–2)
                      good       share of good steers (all three ratings ≥ 1)
                      n          answers rated
                      within     kl ≤ max_kl
                      answers    the greedy answers to ``questions``, in order
                      ratings    per answer [concept, relevance, fluency]
                      seconds    time of this candidate (KL, answers, judge)
    questions       the selection questions answered
    base_answers    the base model's answers to them
    base            the base answers judged: concept, relevance, fluency, aggregate, good, n
    max_new_tokens  greedy answer length
    judge           who rated (offline, a URL, a callable's name)
    kl_kind         what ``kl`` is, in words (which probe)
    probe_prompts   the probe's prompts (selection questions too)
    seconds         the whole search
    steerformer_version
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Sequence

import torch

from ...configs import DEFAULT_JUDGED_MAX_KL, check_max_kl, progress_bar
from ...errors import SteerformerError, bad_argument
from ...prompts import SPLITS
from ..probe import AnswerBatch, KLProbe, model_device
from .judge import concept_words, judge_answers, make_judge, summarize

log = logging.getLogger(__name__)

#: the default ceiling of a judged choice, nats/token on the probe (configs.DEFAULT_JUDGED_MAX_KL)
DEFAULT_CEILING = DEFAULT_JUDGED_MAX_KL
#: the default ladder of KL levels (those ≤ the ceiling, and the ceiling itself, are the candidates):
#: four, so that the default steer stays within a minute on SmolLM2 (each candidate is one generation)
KL_LEVELS = (0.15, 0.3, 0.45, 0.6)
#: greedy length of the selection answers: the report's (evaluate's default), so that a fluency
#: collapse late in an answer is seen when choosing
SELECTION_TOKENS = 40
#: a ladder point is accepted 10 % below its level (algebra.search_gain's tolerance)
LADDER_TOL = 0.1

KL_KIND = ("mean over the probe's continuation tokens of KL(p_base || p_steered), teacher-forced on the base "
           "model's greedy continuations of the probe (selection) prompts, nats/token")


# ---- KL on the probe ------------------------------------------------------------------------------
ANSWER_KL_KIND = ("mean over the base answers' tokens of KL(p_base || p_steered), teacher-forced on the base "
                  "model's greedy answers to the selection questions, nats/token")


def answer_probe(baseline: Any, device: Any = None) -> KLProbe:
    """The KL probe made of the base generation itself: the selection prompts followed by the base
    model's answers (an ``evaluate.Baseline``) and the base log-probabilities it already holds — the
    evaluation's KL, on the selection questions. The default probe of :func:`judged_strength` (the
    addition passes its ``calibrate.ContinuationProbe``)."""
    base = torch.cat([lp.to(torch.float64) for lp in baseline.logprobs]) if baseline.logprobs else \
        torch.empty(0, 0, dtype=torch.float64)
    return KLProbe(AnswerBatch.of(baseline.prompts, baseline.answers, device=device), base,
                   texts=list(baseline.questions), kind=ANSWER_KL_KIND)


class _KLMemo:
    """The probe KL of each strength tried, each measured once (the ladder and the search share it)."""

    def __init__(self, model: Any, at: Callable[[float], ContextManager], probe: Any,
                 memo: dict[float, float] | None = None) -> None:
        self.model, self.at, self.probe = model, at, probe
        self.values: dict[float, float] = {} if memo is None else memo

    def __call__(self, strength: float) -> float:
        s = float(strength)
        if s not in self.values:
            with self.at(s):
                self.values[s] = self.probe.kl_of(self.model)
        return self.values[s]


def kl_ladder(model: Any, at: Callable[[float], ContextManager], probe: Any, levels: Sequence[float], *,
              start: float = 1.0, smallest: float = 1e-3, largest: float = 64.0,
              memo: dict[float, float] | None = None) -> list[tuple[float, float, float]]:
    """The strength reaching each KL level on ``probe``: ``[(strength, kl, level), ...]`` by increasing
    level, each kl ≤ its level and (where reachable) ≥ 90 % of it — ``algebra.search_gain`` from
    ``start`` (in the method's strength unit), then from the last strength found scaled by √(level
    ratio) (KL ∝ strength² for small strengths). A level reached by no strength in [``smallest``,
    ``largest``] (the edit saturates, or the smallest strength is already above it) is left out; two
    levels that land on the same strength give one point. ``memo``: {strength: KL} already measured."""
    from ..algebra import search_gain

    for name, v in (("start", start), ("smallest", smallest), ("largest", largest)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise bad_argument(name, v, "a finite strength > 0 (the method's unit)")
    if not smallest <= start <= largest:
        raise bad_argument("start", start, f"a strength in [smallest, largest] = [{smallest:g}, {largest:g}]")
    kl_of = memo if isinstance(memo, _KLMemo) else _KLMemo(model, at, probe, memo)
    out: list[tuple[float, float, float]] = []
    prev: tuple[float, float] | None = None  # (strength, KL) of the last level found
    for level in sorted(check_max_kl(v) for v in levels):
        guess = float(start) if prev is None or prev[1] <= 0 else \
            min(max(prev[0] * math.sqrt(level / prev[1]), smallest), largest)
        try:
            found = search_gain(lambda s: (kl_of(s), None), level, 1.0, alpha0=guess, tol=LADDER_TOL,
                                alpha_min=smallest, alpha_max=largest)
        except SteerformerError:  # even the smallest strength is above this level: the next may fit
            continue
        if not out or out[-1][0] != found.gain:
            out.append((found.gain, found.kl, level))
        if found.gain >= largest and found.kl < level * (1 - LADDER_TOL):  # saturated: no higher level is reached
            break
        prev = (found.gain, found.kl)
    return out


# ---- the result -----------------------------------------------------------------------------------
@dataclasses.dataclass
class StrengthPoint:
    """One candidate strength on the selection questions (the module docstring's ``points``)."""

    strength: float
    level: float | None
    kl: float
    concept: float
    relevance: float
    fluency: float
    aggregate: float
    good: float
    n: int
    within: bool
    answers: list[str]
    ratings: list[list[float]]
    seconds: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "StrengthPoint":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


CSV_FIELDS = ("strength", "level", "kl", "concept", "relevance", "fluency", "aggregate", "good", "n", "within",
              "seconds")


@dataclasses.dataclass
class StrengthSearch:
    """The dose curve of a judged strength search and its choice; speaks the result protocol."""

    concept: str
    max_kl: float
    chosen: int | None
    choice: str
    points: list[StrengthPoint]
    questions: list[str]
    base_answers: list[str]
    base: dict
    max_new_tokens: int
    judge: str | None
    kl_kind: str = KL_KIND
    probe_prompts: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def best(self) -> StrengthPoint | None:
        """The chosen candidate (None: no candidate within the ceiling)."""
        return None if self.chosen is None else self.points[self.chosen]

    @property
    def strength(self) -> float | None:
        """The chosen strength (None: no candidate within the ceiling)."""
        best = self.best
        return None if best is None else best.strength

    def to_dict(self) -> dict:
        from ...version import __version__
        from ...results import VERSION_KEY

        return {"concept": self.concept, "max_kl": self.max_kl, "chosen": self.chosen, "strength": self.strength,
                "choice": self.choice, "points": [p.to_dict() for p in self.points], "questions": self.questions,
                "base_answers": self.base_answers, "base": self.base, "max_new_tokens": self.max_new_tokens,
                "judge": self.judge, "kl_kind": self.kl_kind, "probe_prompts": self.probe_prompts,
                "seconds": self.seconds, VERSION_KEY: __version__}

    @classmethod
    def from_dict(cls, d: Mapping) -> "StrengthSearch":
        names = {f.name for f in dataclasses.fields(cls)} - {"points"}
        return cls(points=[StrengthPoint.from_dict(p) for p in d.get("points") or []],
                   **{k: v for k, v in d.items() if k in names})

    def to_json(self, path: str | Path | None = None) -> str:
        from ...results import json_text

        return json_text(self.to_dict(), path)

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_FIELDS + ("chosen",))
        for i, p in enumerate(self.points):
            w.writerow([getattr(p, f) for f in CSV_FIELDS] + [i == self.chosen])
        return buf.getvalue()

    def save(self, out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """``strength.json``, ``strength.csv`` and (``plots``) ``strength_curve.png``."""
        from ...results import save_table

        return save_table(self, out_dir, "strength", plots=plots)

    @classmethod
    def load(cls, out_dir: str | Path) -> "StrengthSearch":
        from ...results import read_json

        return cls.from_dict(read_json(Path(out_dir) / "strength.json"))

    def plot(self, out_dir: str | Path) -> list[Path]:
        """The dose curve against KL: the mean ratings, the aggregate and the good-steer share, the
        ceiling and the choice marked → ``strength_curve.png``."""
        from matplotlib.figure import Figure

        from ...results import save_figure

        if not self.points:
            return []
        fig = Figure(figsize=(7, 4.2))
        ax = fig.add_subplot(1, 1, 1)
        kl = [p.kl for p in self.points]
        for field, style in (("concept", "^-"), ("relevance", "v-"), ("fluency", "d-"), ("aggregate", "o-"),
                             ("good", "s--")):
            ax.plot(kl, [getattr(p, field) for p in self.points], style, ms=4,
                    lw=2 if field == "aggregate" else 1, label=field + (" (share)" if field == "good" else ""))
        ax.axvline(self.max_kl, color="r", lw=0.8, ls=":", label=f"ceiling {self.max_kl:g}")
        if self.best is not None:
            ax.plot([self.best.kl], [self.best.aggregate], "k*", ms=14, label=f"chosen: {self.best.strength:.4g}")
        ax.set_xlabel("KL(base ‖ steered) on the probe, nats/token")
        ax.set_ylabel("mean rating (0–2); good-steer share (0–1)")
        ax.legend(fontsize=7)
        fig.suptitle(f"judged strength for {self.concept!r}: {len(self.questions)} selection questions, "
                     f"{self.max_new_tokens} greedy tokens, judge {self.judge}", fontsize=9)
        return [save_figure(fig, Path(out_dir) / "strength_curve.png")]

    def summary(self) -> str:
        lines = [f"judged strength for {self.concept!r} (ceiling KL {self.max_kl:g}; {len(self.questions)} selection "
                 f"questions, {self.max_new_tokens} tokens, judge {self.judge}): {self.choice}"]
        for i, p in enumerate(self.points):
            mark = "*" if i == self.chosen else (" " if p.within else "x")
            lines.append(f" {mark} strength {p.strength:.4g}: KL {p.kl:.3f}, aggregate {p.aggregate:.2f}, good "
                         f"{p.good:.2f} (concept {p.concept:.2f}, relevance {p.relevance:.2f}, fluency {p.fluency:.2f})")
        return "\n".join(lines)


def choose(points: Sequence[StrengthPoint], max_kl: float) -> int | None:
    """The index of the best mean aggregate among the points with KL ≤ ``max_kl`` (ties: lower KL,
    then the earlier point); None when no point is within."""
    ok = [i for i, p in enumerate(points) if p.kl <= max_kl]
    if not ok:
        return None
    return max(ok, key=lambda i: (round(points[i].aggregate, 9), -points[i].kl, -i))


# ---- the search -----------------------------------------------------------------------------------
def check_selection_questions(questions: Sequence[str]) -> list[str]:
    """``questions`` as a list, refused when empty or when one is a report question (a choice made
    on the report split would be reported on the questions it was chosen on)."""
    questions = [str(q) for q in questions]
    if not questions:
        raise bad_argument("questions", questions, "at least one selection question")
    leaked = sorted(set(questions) & set(SPLITS["report"]))
    if leaked:
        raise bad_argument("questions", leaked[0], "selection questions (prompts.SPLITS['selection'] or your own), "
                           "never a report question", "Choices are made on selection questions only.")
    return questions


@torch.no_grad()
def judged_strength(model: Any, tokenizer: Any, at: Callable[[float], ContextManager], concept: str | Sequence[str],
                    strengths: Sequence[float] | None = None, *, levels: Sequence[float] | None = None,
                    max_kl: float = DEFAULT_CEILING, judge: Any = None, questions: Sequence[str] | None = None,
                    probe: Any = None, baseline: Any = None, max_new_tokens: int = SELECTION_TOKENS,
                    start: float = 1.0, smallest: float = 1e-3, largest: float = 64.0,
                    kl_memo: dict[float, float] | None = None, progress: Any = False) -> StrengthSearch:
    """Choose the strength of ``at`` by the judge on the selection questions (module docstring).

    ``at``: strength -> context manager steering ``model`` inside its ``with``. ``concept``: the
    concept's word, phrase or description (or a list of words that count as mentions).
    ``strengths``: the candidates (default: :func:`kl_ladder` over ``levels``, default
    :data:`KL_LEVELS`, those ≤ ``max_kl`` and ``max_kl`` itself; ``start``/``smallest``/``largest``
    bound its search in the method's unit). ``judge``: a judge or its spec (``make_judge``; default
    "offline"). ``questions``: default ``prompts.SPLITS["selection"]``; a report question is refused.
    ``baseline``: the base model's ``evaluate.Baseline`` of ``questions`` (default: generated here,
    ``max_new_tokens`` greedy tokens); ``probe``: where KL is measured (default: :func:`answer_probe`
    of the baseline; the addition passes its ``ContinuationProbe``). ``kl_memo``: {strength: probe KL} already measured (filled).
    ``progress``: one line per candidate on stderr. The model is left as it was."""
    from ..chat import generate_answers
    from .evaluate import Baseline, answer_logprobs, answer_nlls, judge_items, judge_name

    t_start = time.perf_counter()
    max_kl = check_max_kl(max_kl)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise bad_argument("max_new_tokens", max_new_tokens, "a whole number of tokens >= 1")
    if not callable(at):
        raise bad_argument("at", at, "a function strength -> context manager that steers the model inside its with")
    words = concept_words(concept)
    description = concept if isinstance(concept, str) else ", ".join(str(c) for c in concept)
    judge = make_judge("offline" if judge is None else judge)
    if judge is None:
        raise bad_argument("judge", "none", "a judge: the choice is made on its ratings", "Use judge='offline'.")
    if baseline is not None:
        questions = check_selection_questions(baseline.questions)
    else:
        questions = check_selection_questions(SPLITS["selection"] if questions is None else questions)
    base = baseline if baseline is not None else Baseline.of(model, tokenizer, questions,
                                                             max_new_tokens=max_new_tokens)
    if probe is None:
        probe = answer_probe(base, model_device(model))
    if probe.texts:
        check_selection_questions(probe.texts)
    kl_of = _KLMemo(model, at, probe, kl_memo)
    if strengths is None:
        ladder_levels = sorted({check_max_kl(v) for v in (KL_LEVELS if levels is None else levels)
                                if check_max_kl(v) <= max_kl} | {max_kl})
        ladder = kl_ladder(model, at, probe, ladder_levels, start=start, smallest=smallest, largest=largest,
                           memo=kl_of)
        candidates = [(s, lvl) for s, _, lvl in ladder]
        if not candidates:
            raise bad_argument("max_kl", max_kl, f"a ceiling some strength in [{smallest:g}, {largest:g}] fits "
                               "(even the smallest is above it)", "Raise max_kl or give strengths=.")
    else:
        candidates = []
        for s in strengths:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
                raise bad_argument("strengths", s, "finite numbers (the method's strength unit)")
            candidates.append((float(s), None))
        if not candidates:
            raise bad_argument("strengths", list(strengths), "at least one strength")
    candidates = sorted(dict(candidates).items())  # one point per strength, by increasing strength

    base_judged = summarize(judge_answers(judge_items(base, base.texts, description, words, base.nll_free_each),
                                          judge))
    bar = progress_bar(progress, "judged strength", total=len(candidates), unit="strength")
    points: list[StrengthPoint] = []
    try:
        for strength, level in candidates:
            t0 = time.perf_counter()
            kl = kl_of(strength)
            with at(strength):
                ids = generate_answers(model, tokenizer, base.prompts, max_new_tokens=base.max_new_tokens)
            texts = [tokenizer.decode(a, skip_special_tokens=True) for a in ids]
            nlls = answer_nlls(answer_logprobs(model, base.free_prompts, ids), ids)  # under the base model
            ratings = judge_answers(judge_items(base, texts, description, words, nlls), judge)
            s = summarize(ratings)
            p = StrengthPoint(strength=strength, level=level, kl=kl, concept=s["concept"], relevance=s["relevance"],
                              fluency=s["fluency"], aggregate=s["aggregate"], good=s["good"], n=s["n"],
                              within=kl <= max_kl, answers=texts,
                              ratings=[[r.concept, r.relevance, r.fluency] for r in ratings],
                              seconds=time.perf_counter() - t0)
            points.append(p)
            line = (f"strength {strength:.4g}: KL {kl:.3f}{'' if p.within else ' (over the ceiling)'}, aggregate "
                    f"{p.aggregate:.2f}, good {p.good:.2f} (concept {p.concept:.2f}, relevance {p.relevance:.2f}, "
                    f"fluency {p.fluency:.2f}), {p.seconds:.1f} s")
            log.info("judged strength for %r: %s", description, line)
            if progress:
                bar.write(f"  {line}", file=sys.stderr)
            bar.update(1)
    finally:
        bar.close()
    chosen = choose(points, max_kl)
    if chosen is None:
        how = f"no candidate within the ceiling KL {max_kl:g} (lowest KL {min(p.kl for p in points):.3g})"
    else:
        b = points[chosen]
        how = (f"strength {b.strength:.4g}: the best mean aggregate ({b.aggregate:.2f}) of the judge over "
               f"{len(questions)} selection answers among {sum(p.within for p in points)} candidate(s) with KL <= "
               f"{max_kl:g} (KL {b.kl:.3f}; ties: lower KL)")
    return StrengthSearch(concept=description, max_kl=max_kl, chosen=chosen, choice=how, points=points,
                          questions=list(questions), base_answers=list(base.texts), base=base_judged,
                          max_new_tokens=int(base.max_new_tokens), judge=judge_name(judge),
                          kl_kind=probe.kind or KL_KIND, probe_prompts=list(probe.texts or []),
                          seconds=time.perf_counter() - t_start)


__all__ = ["DEFAULT_CEILING", "KL_LEVELS", "SELECTION_TOKENS", "StrengthPoint", "StrengthSearch", "answer_probe",
           "check_selection_questions", "choose", "judged_strength", "kl_ladder"]
