"""Steering methods side by side on a chat model, AxBench-style (issue 27 item 4; docs/steering-chat.md,
"Peers"): the same questions, the same judge (``steerformer.steering.evaluation.judge``), the same KL.

Used by ``bench_chat_steering.py`` (the one entry point). Per concept, the questions split in two:

* SELECTION — every strength of every method is measured here, and only here are choices made;
* REPORT (≥ 10 questions, never used to choose anything) — the chosen settings are measured here.

For each method and concept: the best setting among those with selection KL ≤ 0.5, and among those
with KL ≤ 0.7 (``BUDGETS``; by mean aggregate, then good-steer share, then lower KL); and one fixed setting per
method across concepts (the strength whose mean over concepts is best, with mean selection KL ≤ 0.6).

Judged per answer (``judge``, offline by default): concept, relevance, fluency (0–2), aggregate
(harmonic mean, 0 if any is 0), good steer (all three ≥ 1); per setting also the concept rate
(whole-word mentions), KL and fluency (free).

KL here is the mean over answer tokens of KL(p_base(· | question, a<t) ‖ p_method(· | prompt', a<t)),
teacher-forced on the *base* model's greedy answers, where prompt' is the method's prompt (the
question itself for every method that edits the model; the question with the instruction for
prompting). Fluency (free) is the steered answers' NLL under the base model after an empty user
turn ÷ the base answers' NLL there.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

#: contrastive texts of the DiffMean hook and steering-vectors (the same pairs for both): a text
#: about the concept against the same text about a neutral noun; none is a question we judge on.
CONTRAST_TEMPLATES = (
    "Let me tell you about {}.",
    "The best part of the whole trip was the {}.",
    "We spent the afternoon talking about {}.",
    "Her new book is all about {}.",
    "I can't stop thinking about {}.",
    "The museum had a whole room dedicated to {}.",
    "My favourite topic of conversation is {}.",
    "He asked me what I knew about {}.",
)
NEUTRAL_NOUNS = ("paper", "the weather", "tables", "numbers", "windows", "history", "shoes", "furniture")

#: AxBench's prompt baseline (Wu et al. 2025): the instruction appended to the question in the user turn
PROMPT_AXBENCH = ("{question} You must include content related to {concept} in your answer, while still "
                  "answering the question.")
PROMPT_USER = "{question} In your answer, mention {concept}."
PROMPT_SYSTEM = "You are a helpful assistant. In every answer, mention {concept}."

BUDGETS = (0.5, 0.7)
FIXED_BUDGET = 0.6


def contrast_pairs(concept: str) -> list[tuple[str, str]]:
    """(text about the concept, the same text about a neutral noun): 2 neutral nouns per template."""
    pairs = []
    for i, t in enumerate(CONTRAST_TEMPLATES):
        for j in (i, i + 1):
            pairs.append((t.format(concept), t.format(NEUTRAL_NOUNS[j % len(NEUTRAL_NOUNS)])))
    return pairs


# ---- what one measurement is ---------------------------------------------------------------------
@dataclasses.dataclass
class Split:
    """One split of the questions: the base model's answers on it (steerformer's Baseline)."""

    name: str
    baseline: Any  # steerformer.steering.evaluation.evaluate.Baseline


@dataclasses.dataclass
class Point:
    """One (method, strength) on one split of one concept."""

    concept: str
    method: str
    setting: str
    strength: float | None
    split: str
    kl: float
    concept_rate: float
    concept_score: float
    relevance: float
    fluency: float
    aggregate: float
    good: float
    fluency_free: float
    distinct2: float
    seconds: float
    answers: list[str]
    ratings: list[dict]
    info: dict = dataclasses.field(default_factory=dict)

    def row(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("answers", "ratings")}


@dataclasses.dataclass
class Setting:
    """What a method does at one strength: a context manager steering the model (weights or hooks)
    and, for prompting, the prompts it answers instead of the plain questions."""

    context: Callable[[], Any] = contextlib.nullcontext
    prompts: Callable[[Split], list[list[int]]] | None = None
    label: str = ""
    info: dict = dataclasses.field(default_factory=dict)


class Bench:
    """The model, the tokenizer, the judge and what every method shares (the probe, a middle layer)."""

    def __init__(self, model: Any, tok: Any, judge: Any, *, max_new_tokens: int, log: Callable[[str], None],
                 smoke: bool = False) -> None:
        import steerformer as sf
        from steerformer.steering.methods.addition.calibrate import ContinuationProbe
        from steerformer.steering.evaluation.evaluate import PROBE_QUESTIONS

        self.model, self.tok, self.judge, self.log, self.smoke = model, tok, judge, log, smoke
        self.partial: Path | None = None  # where run() writes the selection sweep after each concept
        self.max_new_tokens = max_new_tokens
        self.source = sf.open_source(model)
        self.n_layers = self.source.adapter.n_layers
        self.mid = self.n_layers // 2  # "a middle layer" of the plain peers (SmolLM2: 15 of 30)
        self.probe = ContinuationProbe.of(model, self.source.adapter, tok, PROBE_QUESTIONS[:2] if smoke else None)
        self.scale = {self.mid: self.probe.residual_scale(self.mid)}

    def probe_prompts(self) -> list[list[int]]:
        """Prompts of the throughput check: the first 8 report questions (or all of them)."""
        return self.report_split.baseline.prompts[: max(2, min(8, len(self.report_split.baseline.prompts)))]

    def residual_scale(self, layer: int) -> float:
        if layer not in self.scale:
            self.scale[layer] = self.probe.residual_scale(layer)
        return self.scale[layer]

    def split(self, name: str, questions: Sequence[str]) -> Split:
        from steerformer.steering.evaluation.evaluate import Baseline

        return Split(name, Baseline.of(self.model, self.tok, list(questions), max_new_tokens=self.max_new_tokens))

    def chat(self, messages_per_question: Sequence[list[dict]]) -> list[list[int]]:
        rows = []
        for messages in messages_per_question:
            ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
            rows.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
        return rows

    @torch.no_grad()
    def measure(self, split: Split, concept: str, method: str, strength: float | None, setting: Setting) -> Point:
        """KL on the base answers, the method's own greedy answers, their fluency under the base model
        and the judge's ratings (module docstring)."""
        from steerformer.steering.evaluation.evaluate import (
            answer_logprobs, distinct2, generate_answers, mean_kl, mean_nll, mentions, word_forms,
        )
        from steerformer.steering.evaluation.judge import JudgeItem, judge_answers, summarize

        base = split.baseline
        t0 = time.perf_counter()
        prompts = setting.prompts(split) if setting.prompts is not None else base.prompts
        with setting.context():
            kl = mean_kl(base.logprobs, answer_logprobs(self.model, prompts, base.answers))
            ids = generate_answers(self.model, self.tok, prompts, max_new_tokens=base.max_new_tokens)
        texts = [self.tok.decode(a, skip_special_tokens=True) for a in ids]
        # fluency under the base model (the context has closed): after an empty user turn, per answer
        lps = answer_logprobs(self.model, base.free_prompts, ids)
        per = [float(-lp[torch.arange(len(a)), torch.as_tensor(list(a))].sum() / len(a)) if len(a) else None
               for lp, a in zip(lps, ids)]
        items = [JudgeItem(question=q, answer=t, concept=concept, base_answer=b, nll_free=n,
                           base_nll_free=base.nll_free)
                 for q, t, b, n in zip(base.questions, texts, base.texts, per)]
        ratings = judge_answers(items, self.judge)
        s = summarize(ratings)
        p = Point(concept=concept, method=method, setting=setting.label, strength=strength, split=split.name, kl=kl,
                  concept_rate=sum(mentions(texts, word_forms(concept))) / len(texts), concept_score=s["concept"],
                  relevance=s["relevance"], fluency=s["fluency"], aggregate=s["aggregate"], good=s["good"],
                  fluency_free=mean_nll(lps, ids) / base.nll_free, distinct2=distinct2(texts),
                  seconds=time.perf_counter() - t0, answers=texts, ratings=[r.to_dict() for r in ratings],
                  info=dict(setting.info))
        self.log(f"  [{concept}/{split.name}] {method} {setting.label}: KL {p.kl:.3f}, concept rate "
                 f"{p.concept_rate:.2f}, aggregate {p.aggregate:.2f}, good {p.good:.2f}, fluency (free) "
                 f"{p.fluency_free:.2f} ({p.seconds:.0f} s)")
        return p


# ---- the methods ---------------------------------------------------------------------------------
class Method:
    """A steering method of the comparison: ``prepare(bench, concept)`` once per concept (fits a
    vector, calls steer, ...), then ``setting(state, strength)`` for each strength of ``grid``."""

    name = ""
    grid: tuple = (None,)
    what = ""
    #: True: the method chooses its own strength on the selection questions (``choice``); the bench
    #: measures that choice on the report split and sweeps nothing
    chooses_itself = False

    def choice(self, bench: "Bench", state: Any, budget: float) -> tuple[Any, dict | None]:
        """(strength, what the method saw on the selection questions) of its own choice within
        ``budget``; (None, None) when it has none."""
        raise NotImplementedError

    def available(self) -> str | None:
        """None when the method can run here, else the one line saying why it is skipped."""
        return None

    def prepare(self, bench: Bench, concept: str) -> Any:
        return None

    def setting(self, bench: Bench, state: Any, strength: Any) -> Setting:
        raise NotImplementedError


class SteerChosen(Method):
    """A method run by ``sf.steer`` as a user calls it, choosing its own strength: its edits as the
    record holds them, one setting (within a budget when its KL is)."""

    chooses_itself = True
    method: str | None = None  # the registered name (None: the default of a causal LM)
    options: dict = {}

    def available(self):
        if self.method is None:
            return None
        return None if _registered(self.method) is not None else \
            f"{self.name}: no method registered as {self.method!r} on this branch; skipped"

    def steer(self, bench, concept, **options):
        import steerformer as sf
        from steerformer.steering.evaluation.evaluate import PROBE_QUESTIONS

        # the smoke run scans no layers and probes with 2 prompts
        kw = {"layer": bench.n_layers - 1, "prompts": PROBE_QUESTIONS[:2]} if bench.smoke else {}
        if self.method is not None:
            kw["method"] = self.method
        t0 = time.perf_counter()
        rec = sf.steer(bench.model, token=concept, tokenizer=bench.tok, report=False, **kw, **options)
        seconds = time.perf_counter() - t0
        sf.unsteer(bench.model)
        return rec, seconds

    def prepare(self, bench, concept):
        rec, seconds = self.steer(bench, concept, **self.options)
        cal = rec.details.to_dict() if rec.details is not None else {}
        state = {"record": rec, "seconds": seconds, "layers": cal.get("layers"), "alpha": cal.get("alpha")}
        bench.log(f"  {self.name} on {concept}: {seconds:.0f} s; " + (rec.message or "").splitlines()[0][:160])
        if self.method is None:
            bench.last_steer = state  # the throughput check reuses the last concept's edit
        return state

    def choice(self, bench, state, budget):
        rec = state["record"]
        kl = rec.kl if rec.kl is not None else 0.0
        return (1.0, {"split": "selection", "kl_probe": kl, "source": "the method's own choice"}) \
            if kl <= budget else (None, None)

    def setting(self, bench, state, strength):
        from steerformer.steering import edits_applied

        edits = [type(e).from_dict({**e.to_dict(), "gain": e.gain * strength}) for e in state["record"].edits]
        info = {"layers": state["layers"], "alpha": None if state["alpha"] is None else state["alpha"] * strength,
                "steer_seconds": state["seconds"]}
        return Setting(context=lambda: edits_applied(bench.model, edits), label=f"gain x{strength:.3g}", info=info)


class DefaultSteer(SteerChosen):
    name = "steer (default)"
    what = ("sf.steer(model, token=c, tokenizer=tok): addition as weights, the largest gain within the default KL "
            "budget (0.5)")


def _registered(name: str):
    from steerformer.steering import methods

    for getter in ("get_method", "get", "method"):
        fn = getattr(methods, getter, None)
        if callable(fn):
            try:
                return fn(name)
            except Exception:  # noqa: BLE001 — an unknown name: not registered
                return None
    registry = getattr(methods, "METHODS", None) or getattr(methods, "REGISTRY", None)
    return registry.get(name) if isinstance(registry, dict) else None


class PaperEdit(Method):
    name = "paper edit (last layer)"
    what = "sf.steer(model, token=' c', tokenizer=tok, strength=s): the rank-1 W_O edit of the last layer"
    grid = (10.0, 15.0, 20.0, 25.0)  # SmolLM2: KL 0.003, 0.075, 4.0 at strength 3, 10, 30

    def setting(self, bench, state, strength):
        import steerformer as sf

        return Setting(context=lambda: sf.steered(bench.model, token=" " + state, tokenizer=bench.tok,
                                                  strength=strength, report=False),
                       label=f"strength {strength:g}")

    def prepare(self, bench, concept):
        ids = bench.tok(" " + concept, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:  # the paper's direction is one token's unembedding row
            raise ValueError(f"' {concept}' is {len(ids)} tokens, the paper's edit takes one")
        return concept


def _residual_mean(bench: Bench, texts: Sequence[str], layer: int) -> torch.Tensor:
    """The mean residual state after ``layer`` over the texts' real tokens but the first."""
    from steerformer.prompts import PromptBatch
    from steerformer.steering.probe import capture

    batch = PromptBatch.from_texts(list(texts), bench.tok)
    h = capture(bench.model, bench.source.adapter, batch, outputs=[layer]).outputs[layer].to("cpu", torch.float64)
    keep = batch.attention_mask.bool().clone()
    keep[:, 0] = False
    return h[keep].mean(0)


class DiffMean(Method):
    name = "DiffMean hook"
    what = ("sf.activation_steering at the middle layer, v = mean state over the contrast texts about c minus "
            "about neutral nouns (all tokens but the first); strength = c x residual norm")
    grid = (0.15, 0.2, 0.25, 0.3, 0.35)  # SmolLM2, layer 15: KL ≈ 0.04, 0.18, 0.46 at 0.1, 0.2, 0.3

    def prepare(self, bench, concept):
        pairs = contrast_pairs(concept)
        layer = bench.mid
        with torch.no_grad():
            v = _residual_mean(bench, [p for p, _ in pairs], layer) - _residual_mean(bench, [n for _, n in pairs], layer)
        return {"layer": layer, "v": v, "norm": float(v.norm())}

    def setting(self, bench, state, strength):
        import steerformer as sf

        layer = state["layer"]
        coeff = strength * bench.residual_scale(layer) / state["norm"]
        return Setting(context=lambda: sf.activation_steering(bench.model, {layer: state["v"]}, coeff=coeff,
                                                              positions="skip-first"),
                       label=f"{strength:g} x residual norm", info={"layer": layer, "coeff": coeff})


class SteeringVectors(Method):
    name = "steering-vectors"
    what = ("steering-vectors 0.12.2 as its docs show: train_steering_vector(model, tok, pairs, layers=[mid], "
            "read_token_index=-1), `with vec.apply(model, multiplier=m)`; strength = m x |v| / residual norm")
    grid = (0.15, 0.2, 0.25, 0.3, 0.35)  # the same units as DiffMean's

    def available(self):
        try:
            import steering_vectors  # noqa: F401
        except ImportError as exc:
            return f"steering-vectors: not installed ({exc}); pip install --no-deps steering-vectors; skipped"
        return None

    def prepare(self, bench, concept):
        from steering_vectors import train_steering_vector

        layer = bench.mid
        vec = train_steering_vector(bench.model, bench.tok, contrast_pairs(concept), layers=[layer],
                                    read_token_index=-1, show_progress=False)
        return {"vec": vec, "layer": layer, "norm": float(vec.layer_activations[layer].float().norm())}

    def setting(self, bench, state, strength):
        m = strength * bench.residual_scale(state["layer"]) / state["norm"]
        return Setting(context=lambda: state["vec"].apply(bench.model, multiplier=m),
                       label=f"{strength:g} x residual norm", info={"layer": state["layer"], "multiplier": m})


class Repeng(Method):
    name = "repeng"
    what = "repeng's ControlModel (when it imports)"

    def available(self):
        try:
            import repeng  # noqa: F401
        except Exception as exc:  # noqa: BLE001 — repeng 0.4 raises AttributeError on NumPy 2
            return f"repeng: cannot be imported here ({type(exc).__name__}: {str(exc).splitlines()[0]}); skipped"
        return "repeng: imports, but its run here is not written (it needs numpy < 2 in 0.4); skipped"


class Prompting(Method):
    name = "prompt (mention)"
    template = PROMPT_USER
    what = f"the question followed by \"{PROMPT_USER.split('} ', 1)[1]}\""

    def setting(self, bench, state, strength):
        def prompts(split):
            return bench.chat([[{"role": "user", "content": self.template.format(question=q, concept=state)}]
                               for q in split.baseline.questions])
        return Setting(prompts=prompts, label="instruction in the question")

    def prepare(self, bench, concept):
        return concept


class AxBenchPrompting(Prompting):
    name = "prompt (AxBench)"
    template = PROMPT_AXBENCH
    what = f"AxBench's prompt baseline: the question followed by \"{PROMPT_AXBENCH.split('} ', 1)[1]}\""


class SystemPrompting(Prompting):
    name = "prompt (system)"
    what = f"a system prompt: \"{PROMPT_SYSTEM}\""

    def setting(self, bench, state, strength):
        def prompts(split):
            return bench.chat([[{"role": "system", "content": PROMPT_SYSTEM.format(concept=state)},
                                {"role": "user", "content": q}] for q in split.baseline.questions])
        return Setting(prompts=prompts, label="system prompt")


METHODS: dict[str, type[Method]] = {
    "steer": DefaultSteer, "prompt-axbench": AxBenchPrompting, "prompt": Prompting, "diffmean": DiffMean,
    "steering-vectors": SteeringVectors, "paper": PaperEdit, "repeng": Repeng, "prompt-system": SystemPrompting,
}


# ---- choices on the selection split --------------------------------------------------------------
def rank_key(p: Point) -> tuple:
    """Best first: mean aggregate, then good-steer share, then lower KL."""
    return (p.aggregate, p.good, -p.kl)


def choose(points: Sequence[Point], max_kl: float) -> Point | None:
    ok = [p for p in points if p.kl <= max_kl]
    return max(ok, key=rank_key) if ok else None


def choose_fixed(by_concept: dict[str, list[Point]], max_kl: float) -> Any:
    """The strength with the best mean (aggregate, good, -KL) over concepts among those whose mean
    selection KL is ≤ ``max_kl`` (the same setting for every concept); None when none is."""
    strengths: dict = {}
    for pts in by_concept.values():
        for p in pts:
            strengths.setdefault(p.strength, []).append(p)
    n = len(by_concept)
    best, best_key = None, None
    for s, pts in strengths.items():
        if len(pts) != n:
            continue
        mean = lambda f: sum(getattr(p, f) for p in pts) / n  # noqa: E731
        if mean("kl") > max_kl:
            continue
        key = (mean("aggregate"), mean("good"), -mean("kl"))
        if best_key is None or key > best_key:
            best, best_key = s, key
    return best, best_key is not None


# ---- the run -------------------------------------------------------------------------------------
def run(bench: Bench, concepts: Sequence[str], method_names: Sequence[str], selection: Sequence[str],
        report: Sequence[str]) -> dict:
    """Sweep every method on SELECTION, choose, measure the choices on REPORT. Returns the record."""
    if set(selection) & set(report):
        raise ValueError("a question is in both splits")
    methods, skipped = [], {}
    for name in method_names:
        m = METHODS[name]()
        why = m.available()
        if why is not None:
            print(why, flush=True)  # the skip is always said, --quiet or not
            skipped[m.name] = why
        else:
            methods.append(m)
    sel, rep = bench.split("selection", selection), bench.split("report", report)
    bench.report_split = rep
    states: dict = {}
    sweep: dict[str, dict[str, list[Point]]] = {m.name: {} for m in methods}
    prep_seconds: dict = {}
    reported: dict = {}

    def on_report(m: Method, concept: str, strength: Any) -> dict:
        """The report-split measurement of a chosen setting (a setting chosen twice is measured once)."""
        key = (m.name, concept, strength)
        if key not in reported:
            reported[key] = bench.measure(rep, concept, m.name, strength,
                                          m.setting(bench, states[m.name, concept], strength))
        return reported[key].row()

    per_concept: list[dict] = []
    for concept in concepts:
        bench.log(f"{concept}: selection sweep ({len(selection)} questions)")
        for m in methods:
            t0 = time.perf_counter()
            try:
                states[m.name, concept] = m.prepare(bench, concept)
            except Exception as exc:  # noqa: BLE001 — one method failing is a row, not the end of the run
                line = f"{m.name} on {concept}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                print(line, flush=True)
                skipped[f"{m.name} / {concept}"] = line
                continue
            prep_seconds[m.name, concept] = time.perf_counter() - t0
            if m.chooses_itself:  # its own choice on the selection questions: nothing to sweep
                continue
            sweep[m.name][concept] = [bench.measure(sel, concept, m.name, s, m.setting(bench, states[m.name, concept], s))
                                      for s in m.grid]
        # this concept's choices (they need no other concept), measured on the report split now
        bench.log(f"{concept}: the choices on the report split ({len(report)} questions)")
        for m in methods:
            if (m.name, concept) not in states:
                continue
            for b in BUDGETS:
                if m.chooses_itself:
                    strength, seen = m.choice(bench, states[m.name, concept], b)
                else:
                    p = choose(sweep[m.name].get(concept, []), b)
                    strength, seen = (None, None) if p is None else (p.strength, p.row())
                per_concept.append({"method": m.name, "concept": concept, "choice": f"best at KL <= {b:g}",
                                    "strength": strength, "selection": seen,
                                    "report": None if seen is None else on_report(m, concept, strength)})
        if bench.partial is not None:  # a long run shows what it has measured so far
            bench.partial.parent.mkdir(parents=True, exist_ok=True)
            bench.partial.write_text(json.dumps({"choices": per_concept, "sweep": [
                p.row() | {"answers": p.answers} for pts in sweep.values() for ps in pts.values() for p in ps],
                "report_points": [p.row() | {"answers": p.answers} for p in reported.values()]},
                indent=1, default=float))
    # the fixed setting of each method across concepts, then its report-split measurements
    choices: list[dict] = []
    for m in methods:
        if m.chooses_itself:
            choices += [c for c in per_concept if c["method"] == m.name]
            continue
        fixed, has_fixed = choose_fixed(sweep[m.name], FIXED_BUDGET) if sweep[m.name] else (None, False)
        for concept, pts in sweep[m.name].items():
            choices += [c for c in per_concept if c["method"] == m.name and c["concept"] == concept]
            p = next((p for p in pts if p.strength == fixed), None) if has_fixed else None
            choices.append({"method": m.name, "concept": concept, "choice": f"fixed (KL <= {FIXED_BUDGET:g} on average)",
                            "strength": None if p is None else p.strength, "selection": None if p is None else p.row(),
                            "report": None if p is None else on_report(m, concept, p.strength)})
    return {
        "methods": {m.name: {"what": m.what, "grid": list(m.grid)} for m in methods},
        "skipped": skipped,
        "concepts": list(concepts),
        "selection_questions": list(selection),
        "report_questions": list(report),
        "base": {"selection": _base_info(sel), "report": _base_info(rep)},
        "choices": choices,
        "sweep": [p.row() | {"answers": p.answers, "ratings": p.ratings}
                  for pts in sweep.values() for ps in pts.values() for p in ps],
        "report_points": [p.row() | {"answers": p.answers, "ratings": p.ratings} for p in reported.values()],
        "prepare_seconds": {f"{k[0]} / {k[1]}": v for k, v in prep_seconds.items()},
        "steer_seconds": {c: states[DefaultSteer.name, c]["seconds"] for c in concepts
                          if (DefaultSteer.name, c) in states},
        "seconds": seconds_per_concept(methods, concepts, prep_seconds, sweep, reported),
        "kl": "mean over answer tokens of KL(p_base(.|question, a<t) || p_method(.|method's prompt, a<t)), "
              "teacher-forced on the base model's greedy answers of the same split, nats/token",
        "fluency_free": "steered answers' NLL under the base model after an empty user turn / base answers' NLL there",
    }


def target_lines(record: dict) -> list[str]:
    """The default's mean aggregate on the report split against AxBench's prompt, as a ratio (judged by
    the offline judge: the rated comparison is benchmarks/ratings/)."""
    rows = {(r["method"], r["choice"]): r for r in summary_rows(record)}
    new = rows.get((DefaultSteer.name, f"best at KL <= {BUDGETS[0]:g}"))
    prompt = rows.get((AxBenchPrompting.name, f"best at KL <= {BUDGETS[0]:g}"))
    if new is None or prompt is None:
        return []
    if not prompt["aggregate"] > 0:
        return [f"ratio of mean aggregates, default / AxBench's prompt: n/a (the prompt's aggregate is 0)"]
    return [f"ratio of mean aggregates, default (KL {new['kl']:.3f}) / AxBench's prompt (KL {prompt['kl']:.3f}): "
            f"{new['aggregate'] / prompt['aggregate']:.2f}"]


def seconds_per_concept(methods: Sequence[Method], concepts: Sequence[str], prep: dict, sweep: dict,
                        reported: dict) -> dict:
    """{method: {concept: {"choose": seconds to prepare and choose on the selection split, "report":
    seconds of its report-split measurements}}}."""
    out: dict = {}
    for m in methods:
        for c in concepts:
            if (m.name, c) not in prep:
                continue
            choose_s = prep[m.name, c] + sum(p.seconds for p in sweep[m.name].get(c, []))
            report_s = sum(p.seconds for k, p in reported.items() if k[0] == m.name and k[1] == c)
            out.setdefault(m.name, {})[c] = {"choose": choose_s, "report": report_s}
    return out


def seconds_table(record: dict) -> str:
    """Seconds per concept: to choose (prepare + selection sweep) and to measure on the report split."""
    concepts = record["concepts"]
    lines = ["| method | " + " | ".join(concepts) + " |", "|" + "---|" * (len(concepts) + 1)]
    for m, by in record.get("seconds", {}).items():
        cells = [f"{by[c]['choose']:.0f} ({by[c]['report']:.0f})" if c in by else "n/a" for c in concepts]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def samples_markdown(record: dict, n: int = 2, choice: str = f"best at KL <= {BUDGETS[-1]:g}", width: int = 220) -> str:
    """The first ``n`` report questions of each concept: the base answer and each method's answer at
    its choice ``choice`` (cut at ``width`` characters)."""
    base = record["base"]["report"]
    by = {(p["method"], p["concept"], p["strength"]): p for p in record["report_points"]}
    out = []
    for c in record["concepts"]:
        out.append(f"**{c}**")
        for i in range(min(n, len(base["questions"]))):
            out.append(f"- *{base['questions'][i]}*")
            out.append(f"  - base: {_cut(base['answers'][i], width)}")
            for e in record["choices"]:
                if e["concept"] == c and e["choice"] == choice and e["report"] is not None:
                    p = by.get((e["method"], c, e["strength"]))
                    if p is not None:
                        out.append(f"  - {e['method']}: {_cut(p['answers'][i], width)}")
    return "\n".join(out)


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _base_info(split: Split) -> dict:
    b = split.baseline
    return {"questions": b.questions, "answers": b.texts, "nll_free": b.nll_free, "max_new_tokens": b.max_new_tokens}


# ---- the outputs ---------------------------------------------------------------------------------
SUMMARY_FIELDS = ("concept_rate", "concept_score", "relevance", "fluency", "aggregate", "good", "kl", "fluency_free")


def summary_rows(record: dict) -> list[dict]:
    """One row per (method, choice): the report-split means over concepts (concepts without a
    setting within the budget count as missing, and are counted)."""
    rows = []
    keys: dict = {}
    for c in record["choices"]:
        keys.setdefault((c["method"], c["choice"]), []).append(c)
    for (method, choice), entries in keys.items():
        got = [e["report"] for e in entries if e["report"] is not None]
        row = {"method": method, "choice": choice, "concepts": f"{len(got)}/{len(entries)}",
               "strengths": ", ".join("-" if e["report"] is None else
                                      (e["report"]["setting"] if e["strength"] is None else f"{e['strength']:g}")
                                      for e in entries)}
        for f in SUMMARY_FIELDS:
            row[f] = sum(g[f] for g in got) / len(got) if got else math.nan
        rows.append(row)
    return rows


def markdown_table(record: dict) -> str:
    head = ("| method | choice (on the selection split) | concepts | setting per concept | concept rate | concept | "
            "relevance | fluency | aggregate | good steers | KL | fluency (free) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in summary_rows(record):
        def f(x, d=2):
            return "n/a" if isinstance(x, float) and math.isnan(x) else f"{x:.{d}f}"
        lines.append(f"| {r['method']} | {r['choice']} | {r['concepts']} | {r['strengths']} | {f(r['concept_rate'])} | "
                     f"{f(r['concept_score'])} | {f(r['relevance'])} | {f(r['fluency'])} | **{f(r['aggregate'])}** | "
                     f"**{f(r['good'])}** | {f(r['kl'], 3)} | {f(r['fluency_free'])} |")
    return "\n".join(lines)


def per_concept_table(record: dict, choice_prefix: str = f"best at KL <= {BUDGETS[-1]:g}") -> str:
    """Good-steer share (aggregate) on the report split per concept for one choice."""
    concepts = record["concepts"]
    methods = list(dict.fromkeys(c["method"] for c in record["choices"]))
    head = "| method | " + " | ".join(concepts) + " |"
    lines = [f"{choice_prefix}: good steers (aggregate, KL) on the report split", head,
             "|" + "---|" * (len(concepts) + 1)]
    for m in methods:
        cells = []
        for c in concepts:
            e = next((x for x in record["choices"] if x["method"] == m and x["concept"] == c
                      and x["choice"].startswith(choice_prefix)), None)
            r = e and e["report"]
            cells.append("n/a" if not r else f"{r['good']:.2f} ({r['aggregate']:.2f}, {r['kl']:.2f})")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def csv_text(record: dict) -> str:
    buf = io.StringIO()
    fields = ("split", "method", "concept", "choice", "setting", "strength") + SUMMARY_FIELDS + ("distinct2", "seconds")
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for p in record["sweep"]:
        w.writerow({**p, "choice": ""})
    for c in record["choices"]:
        if c["report"] is not None:
            w.writerow({**c["report"], "choice": c["choice"]})
    return buf.getvalue()


def plot(record: dict, path: Path, title: str) -> Path:
    """Good-steer share and aggregate against KL: each method's selection sweep (mean over concepts,
    thin line) and its choices measured on the report split (markers), log KL axis."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5), layout="constrained")
    axes = (fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2))
    methods = list(dict.fromkeys(p["method"] for p in record["sweep"]))
    colors = {m: f"C{i}" for i, m in enumerate(methods)}
    markers = {f"best at KL <= {b:g}": mk for b, mk in zip(BUDGETS, "os")}
    for ax, field, label, top in ((axes[0], "good", "good steers (share of answers rated >= 1 on all three)", 1),
                                  (axes[1], "aggregate", "aggregate (harmonic mean of the three ratings, 0-2)", 2)):
        for m in methods:
            by_s: dict = {}
            for p in record["sweep"]:
                if p["method"] == m:
                    by_s.setdefault(p["strength"], []).append(p)
            xs, ys = [], []
            for s, pts in by_s.items():
                xs.append(max(sum(p["kl"] for p in pts) / len(pts), 1e-3))
                ys.append(sum(p[field] for p in pts) / len(pts))
            order = sorted(range(len(xs)), key=lambda i: xs[i])
            ax.plot([xs[i] for i in order], [ys[i] for i in order], "-", color=colors[m], lw=1, alpha=0.5,
                    marker=".", label=f"{m}: selection sweep, mean over concepts")
            for choice, mk in markers.items():
                got = [c["report"] for c in record["choices"] if c["method"] == m and c["choice"] == choice
                       and c["report"] is not None]
                if got:
                    ax.scatter([max(g["kl"], 1e-3) for g in got], [g[field] for g in got], marker=mk, s=30,
                               color=colors[m], edgecolor="k", linewidth=0.5, zorder=3)
        for b in BUDGETS:
            ax.axvline(b, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_ylim(-0.03 * top, 1.03 * top)
        ax.set_xlabel("KL(base || method), nats/token, teacher-forced on the base answers")
        ax.set_ylabel(label)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[m], marker=".", label=m) for m in methods]
    handles += [Line2D([], [], ls="", marker=mk, color="grey", markeredgecolor="k",
                       label=f"{c}, chosen on selection, one per concept, measured on report")
                for c, mk in markers.items()]
    axes[0].legend(handles=handles, fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def save(record: dict, out: Path, title: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "peers.json", "csv": out / "peers.csv", "figure": out / "peers.png"}
    files["json"].write_text(json.dumps(record, indent=1, default=float))
    files["csv"].write_text(csv_text(record))
    plot(record, files["figure"], title)
    return files
