"""Answers of every setting to be rated (PROTOCOL.md beside this file): for one half of the concepts
and the named settings, SmolLM2 loaded once, greedy chat answers (40 new tokens) to the 16 questions of
questions.json, and per (setting, concept) the facts: layer(s), gain, probe KL (mean and 95th percentile
per token) and the answer KL (mean per-token KL(base || steered), teacher-forced on the base model's
answers to the same questions, computed as steerformer's evaluation computes it).

Writes into --out (default benchmarks/ratings/<half>/):
    run.json        what the run is (model, questions, tokens, concepts, settings and their code paths)
    answers.jsonl   one line per (setting, concept, question): the answer, its tokens, its own KL
    settings.jsonl  one line per (setting, concept): the facts
Resumable: a (setting, concept) whose facts line exists is skipped; answers of one that was cut short
are dropped and made again.

Run:  heavy python benchmarks/ratings/generate.py --half choose            (SmolLM2; long, resumable)
      heavy python benchmarks/ratings/generate.py --half choose --settings base,kl-0.3 --concepts bread
      python benchmarks/ratings/generate.py --smoke --out /tmp/ratings-smoke   (tiny random Llama, seconds)
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1]), str(HERE.parent)]  # data.py; the checkout; bench_chat_steering

import data  # noqa: E402

PROBE_N, PROBE_TOKENS = 6, 16  # the addition's probe: the first 6 selection questions, 16 greedy tokens


# ---- measuring ------------------------------------------------------------------------------------
class Measure:
    """The base model's answers (the questions and the probe) and the KLs of a steered model against them."""

    def __init__(self, model: Any, tok: Any, questions: Sequence[str], tokens: int) -> None:
        from steerformer.steering.evaluation import evaluate as ev

        self.ev, self.model, self.tok = ev, model, tok
        self.base = ev.Baseline.of(model, tok, list(questions), max_new_tokens=tokens)
        # the same prompts and continuations as the addition's calibration probe (its KL is the one max_kl bounds)
        self.probe = ev.Baseline.of(model, tok, list(ev.PROBE_QUESTIONS[:PROBE_N]), max_new_tokens=PROBE_TOKENS)

    def probe_kl(self, rows: Sequence[Sequence[int]] | None = None) -> dict:
        """Mean and 95th percentile of the per-token KL(base || model as it is now) on the probe's
        continuations (``rows``: other prompts for the same continuations, e.g. a prompted user turn)."""
        import torch
        from steerformer.steering.probe import kl_per_token

        lp = self.ev.answer_logprobs(self.model, rows or self.probe.prompts, self.probe.answers)
        per = torch.cat([kl_per_token(b, s) for b, s in zip(self.probe.logprobs, lp)])
        return {"mean": float(per.mean()), "p95": float(torch.quantile(per, 0.95)), "max": float(per.max())}

    def answers(self, rows: Sequence[Sequence[int]] | None = None) -> dict:
        """The greedy answers of the model as it is now (``rows``: other prompts, default the questions)
        and the answer KL: evaluate.mean_kl over all answer tokens, and per answer."""
        ev = self.ev
        rows = rows or self.base.prompts
        lp = ev.answer_logprobs(self.model, rows, self.base.answers)
        ids = ev.generate_answers(self.model, self.tok, rows, max_new_tokens=self.base.max_new_tokens)
        return {"ids": ids, "texts": [self.tok.decode(a, skip_special_tokens=True) for a in ids],
                "kl": ev.mean_kl(self.base.logprobs, lp),
                # per answer; None where the base answer is empty (no token to compare)
                "kl_each": [ev.mean_kl([b], [s]) if len(b) else None for b, s in zip(self.base.logprobs, lp)]}


def largest_gain(value_at: Callable[[float], float], level: float, alpha0: float, *, smallest: float = 1e-4,
                 largest: float = 8.0, rtol: float = 0.01) -> tuple[float, float]:
    """The largest α (to ``rtol``) whose ``value_at(α)`` is <= ``level`` (value increasing in α): bracket by
    factors of 1.5 from ``alpha0``, then bisect on log α. Returns (α, its value), measured within the level."""
    seen: dict[float, float] = {}

    def at(a: float) -> float:
        if a not in seen:
            seen[a] = value_at(a)
        return seen[a]

    good, bad, a = None, None, alpha0
    for _ in range(40):
        if at(a) <= level:
            good = a
            if a >= largest:
                return a, at(a)
            a = min(a * 1.5, largest)
        else:
            bad = a
            if a <= smallest:
                raise SystemExit(f"no gain >= {smallest:g} reaches a value <= {level:g} (at {a:g}: {at(a):.3g})")
            a = max(a / 1.5, smallest)
        if good is not None and bad is not None:
            break
    while bad / good > 1 + rtol:
        mid = math.sqrt(good * bad)
        if at(mid) <= level:
            good = mid
        else:
            bad = mid
    return good, at(good)


def hidden_contrast(model: Any, tok: Any, words: Sequence[str], carriers: Sequence[str], nouns: Sequence[str],
                    layers: Sequence[int], *, chunk: int = 64) -> dict[int, Any]:
    """{layer: unit vector}: for each word, the templated contrast — the state after the layer at the last
    token of "<carrier> <word>" averaged over carriers, minus the same over every (carrier, noun) — made a
    unit vector; the words' unit contrasts averaged and normalized. The states come from the model's own
    forward (``output_hidden_states=True``: ``hidden_states[layer + 1]`` is the output of block ``layer``);
    one word with steerformer's carriers and nouns is the addition's own direction (checked in the run)."""
    import torch
    from steerformer.prompts import PromptBatch

    words = [" ".join(w.split()) for w in words]
    nouns = [n for n in nouns if n.lower() not in {w.lower() for w in words}]
    texts = [f"{c} {w}" for c in carriers for w in [*words, *nouns]]
    states: dict[int, list] = {k: [] for k in layers}
    dev = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(texts), chunk):
            batch = PromptBatch.from_texts(texts[start:start + chunk], tok).to(dev)
            out = model(**batch.inputs(), output_hidden_states=True, use_cache=False)
            mask = batch.attention_mask.to(torch.float64).cpu()
            last = (mask * torch.arange(mask.shape[1], dtype=torch.float64)).argmax(1)
            for k in layers:
                h = out.hidden_states[k + 1].to("cpu", torch.float64)
                states[k].append(h[torch.arange(h.shape[0]), last])
    n_w = len(words)
    dirs = {}
    for k in layers:
        h = torch.cat(states[k]).reshape(len(carriers), n_w + len(nouns), -1)
        others = h[:, n_w:].mean((0, 1))
        units = []
        for i in range(n_w):
            d = h[:, i].mean(0) - others
            units.append(d / torch.linalg.vector_norm(d))
        u = torch.stack(units).mean(0)
        dirs[k] = u / torch.linalg.vector_norm(u)
    return dirs


# ---- one concept's calibrations (each made once, when a setting first needs it) ------------------
class ConceptWork:
    def __init__(self, model: Any, tok: Any, concept: data.Concept, measure: Measure, log: Callable[[str], None]):
        self.model, self.tok, self.concept, self.m, self.log = model, tok, concept, measure, log

    @functools.cached_property
    def default(self) -> dict:
        """The default construction: one probe, the scan at 0.3 (as sf.steer chooses), a gain per budget."""
        from steerformer.steering import kl_curve

        self.log(f"  {self.concept.name}: the default's scan and gains at {list(data.KL_BUDGETS)} ...")
        return kl_curve(self.model, list(data.KL_BUDGETS), token=self.concept.name, tokenizer=self.tok)

    @property
    def scan_layer(self) -> int:
        return self.default["layers"][0]

    def default_point(self, budget: float) -> dict:
        return next(p for p in self.default["points"] if p["max_kl"] == budget)

    @functools.lru_cache(maxsize=None)
    def layer_curve(self, layer: int) -> dict:
        from steerformer.steering import kl_curve

        self.log(f"  {self.concept.name}: layer {layer} at {data.LAYER_BUDGET:g} ...")
        return kl_curve(self.model, [data.LAYER_BUDGET], token=self.concept.name, tokenizer=self.tok,
                        layers=[layer], max_kl=data.LAYER_BUDGET)

    def scaled(self, alpha: float) -> list:
        """The scan layer's edits at gain α x its residual norm: the kl-0.5 edits scaled (same u, same a)."""
        ref = self.default_point(0.5)
        return [e.scaled(alpha / ref["alpha"]) for e in ref["edits"]]

    @functools.lru_cache(maxsize=None)
    def p95_alpha(self, level: float) -> tuple[float, float]:
        from steerformer.steering import edits_applied

        def p95(alpha: float) -> float:
            with edits_applied(self.model, self.scaled(alpha)):
                return self.m.probe_kl()["p95"]

        self.log(f"  {self.concept.name}: the gain of probe p95 KL {level:g} ...")
        return largest_gain(p95, level, self.default_point(0.5)["alpha"])

    def direction_curve(self, u: Any, how: dict) -> dict:
        from steerformer.steering import Direction, kl_curve

        k = self.scan_layer
        direction = Direction({k: u}, method="templated contrast (benchmarks/ratings)", metadata=how)
        return kl_curve(self.model, list(data.DIRECTION_BUDGETS), direction=direction, tokenizer=self.tok, layers=[k])

    @functools.cached_property
    def dir_more(self) -> dict:
        from steerformer.prompts import CARRIERS, OTHER_NOUNS

        k = self.scan_layer
        self.log(f"  {self.concept.name}: direction over {len(CARRIERS)} carriers ...")
        own = more = hidden_contrast(self.model, self.tok, [self.concept.name], CARRIERS, OTHER_NOUNS, [k])[k]
        default_u = self.default_point(0.3)["edits"][0].u
        check = float(own @ default_u.to(own))
        if check < 0.999:
            self.log(f"  WARNING {self.concept.name}: the hidden-state contrast differs from steer's direction "
                     f"(cos {check:.4f})")
        info = {"carriers": len(CARRIERS), "nouns": len(OTHER_NOUNS),
                "cos_default": float(more @ default_u.to(more)), "check_cos_own_vs_steer": check}
        return {"curve": self.direction_curve(more, info), "info": info}

    @functools.cached_property
    def dir_desc(self) -> dict:
        from steerformer.prompts import CARRIERS, OTHER_NOUNS

        k, words = self.scan_layer, self.concept.words
        self.log(f"  {self.concept.name}: direction of the description's words {words} ...")
        u = hidden_contrast(self.model, self.tok, words, CARRIERS, OTHER_NOUNS, [k])[k]
        default_u = self.default_point(0.3)["edits"][0].u
        info = {"words": words, "cos_default": float(u @ default_u.to(u))}
        return {"curve": self.direction_curve(u, info), "info": info}

    @functools.cached_property
    def split2(self) -> dict:
        from steerformer.steering import kl_curve

        scan = sorted(self.default["scan"], key=lambda r: -r["concept_mass"])
        pair = sorted(r["layers"][0] for r in scan[:2])
        self.log(f"  {self.concept.name}: split over layers {pair} ...")
        curve = kl_curve(self.model, list(data.DIRECTION_BUDGETS), token=self.concept.name, tokenizer=self.tok,
                         layers=pair)
        return {"curve": curve, "info": {"pair": pair}}


def point_of(curve: dict, budget: float) -> dict:
    return next(p for p in curve["points"] if p["max_kl"] == budget)


def edit_facts(edits: Sequence[Any], alpha: float) -> dict:
    return {"layers": sorted({int(e.layer) for e in edits}), "alpha": float(alpha),
            "gamma": [float(e.gain) for e in edits]}


def plan(setting: data.Setting, work: ConceptWork) -> tuple[str, Any, dict]:
    """(kind, what, facts): kind "base" (nothing), "prompt" (the user-turn template) or "edits" (to apply)."""
    fam = setting.family
    if fam == "base":
        return "base", None, {}
    if fam == "prompt":
        tpl = data.AXBENCH_PROMPT if setting.name == "prompt-axbench" else data.AXBENCH_REPO_PROMPT
        return "prompt", tpl, {"template": tpl}
    if fam == "kl":
        p = work.default_point(setting.budget)
        scan = [{"layer": r["layers"][0], "alpha": r["alpha"], "kl": r["kl"], "concept_mass": r["concept_mass"]}
                for r in work.default["scan"]]
        return "edits", p["edits"], {**edit_facts(p["edits"], p["alpha"]), "kl_probe_search": p["kl_probe"],
                                     "scan_at_0.3": scan, "layer_choice": work.default["layer_choice"]}
    if fam == "layer":
        c = work.layer_curve(setting.layer)
        p = point_of(c, setting.budget)
        return "edits", p["edits"], {**edit_facts(p["edits"], p["alpha"]), "kl_probe_search": p["kl_probe"],
                                     "concept_mass_at_budget": c["scan"][0]["concept_mass"],
                                     "residual_norm": c["scan"][0]["residual_norm"]}
    if fam == "p95":
        alpha, p95 = work.p95_alpha(setting.budget)
        edits = work.scaled(alpha)
        return "edits", edits, {**edit_facts(edits, alpha), "p95_level": setting.budget, "p95_search": p95}
    if fam == "norm":
        edits = work.scaled(setting.alpha)
        return "edits", edits, edit_facts(edits, setting.alpha)
    if fam == "peer":  # steering-vectors (the bench extra), at the same probe KL as the default's budget
        import sys

        from steering_vectors import train_steering_vector

        sys.path.insert(0, str(data.ROOT / "benchmarks"))
        from _steering_peers import contrast_pairs

        layer = work.model.config.num_hidden_layers // 2
        vec = train_steering_vector(work.model, work.tok, contrast_pairs(work.concept.name), layers=[layer],
                                    read_token_index=-1, show_progress=False)

        def kl_at(m: float) -> float:
            with vec.apply(work.model, multiplier=m):
                return work.m.probe_kl()["mean"]

        m, kl = largest_gain(kl_at, setting.budget, 1.0, smallest=1e-3, largest=64.0)
        return "context", (lambda: vec.apply(work.model, multiplier=m)), {
            "layers": [layer], "multiplier": m, "iso_kl": setting.budget, "probe_kl_search": kl}
    if fam == "steer":  # the package's own rule, end to end; its edits are applied by the caller
        import steerformer as sf

        rec = sf.steer(work.model, token=work.concept.name, tokenizer=work.tok, **data.STEER_OPTIONS[setting.name])
        sf.unsteer(work.model)
        return "edits", rec.edits, {"layers": sorted({int(e.layer) for e in rec.edits}), "gain": float(rec.gain),
                                    "kl_record": rec.kl, "message": rec.message}
    made = {"dir-more": lambda: work.dir_more, "dir-desc": lambda: work.dir_desc, "split2": lambda: work.split2}[fam]()
    p = point_of(made["curve"], setting.budget)
    return "edits", p["edits"], {**edit_facts(p["edits"], p["alpha"]), "kl_probe_search": p["kl_probe"], **made["info"]}


# ---- the run --------------------------------------------------------------------------------------
def load_model(smoke: bool):
    if smoke:
        from bench_chat_steering import tiny_llama

        model, tok = tiny_llama()
        return model, tok, "tiny random Llama (smoke)"
    import steerformer as sf

    model = sf.load_model("smollm2", auto_class="AutoModelForCausalLM")
    return model, sf.load_tokenizer("smollm2"), "smollm2 (steerformer.BUNDLED_SMOLLM2)"


def check_run(out: Path, header: dict) -> None:
    """A folder holds one run: resuming with another model, other questions or another length is refused."""
    import json

    path = out / "run.json"
    if path.exists():
        old = data.read_json(path)
        if not isinstance(old, dict):
            raise data.RunError(f"--out {out}: its run.json is no JSON object; use another --out, or delete it")
        for key in ("model", "half", "questions", "tokens", "probe_questions"):
            if old.get(key) != header.get(key):
                raise data.RunError(f"--out {out}: it holds a run with another {key} ({old.get(key)!r}); "
                                 "use another --out, or delete it to start again")
        known = {s["name"]: s for s in old.get("settings", [])}
        header["settings"] = list(known.values()) + [s for s in header["settings"] if s["name"] not in known]
        have = {c["name"] for c in old.get("concepts", [])}
        header["concepts"] = old.get("concepts", []) + [c for c in header["concepts"] if c["name"] not in have]
    data.write_text(path, json.dumps(header, indent=1, ensure_ascii=False) + "\n")


@data.one_line_errors
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", default="choose", choices=data.HALVES, help="which concepts (concepts.json)")
    ap.add_argument("--out", default=None, help="the run folder (default benchmarks/ratings/<half>/)")
    ap.add_argument("--settings", default=None, help="comma-separated setting names (default: all)")
    ap.add_argument("--concepts", default=None, help="comma-separated concept names of the half (default: all)")
    ap.add_argument("--tokens", type=int, default=40, help="new tokens per answer")
    ap.add_argument("--smoke", action="store_true", help="tiny random Llama, 2 concepts, 2 questions, 6 tokens")
    args = ap.parse_args(argv)

    import dataclasses
    import json

    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    out = Path(args.out) if args.out else data.default_run(args.half)
    if args.smoke and not args.out:
        raise data.RunError("--smoke needs --out (the committed run folders hold real answers)")
    concepts = data.load_concepts(args.half)
    if args.concepts:
        wanted = [c.strip() for c in args.concepts.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.name for c in concepts})
        if unknown:
            raise data.RunError(f"--concepts: {unknown} are not {args.half} concepts ({', '.join(c.name for c in concepts)})")
        concepts = [c for c in concepts if c.name in wanted]
    questions = data.load_questions()
    tokens = args.tokens
    fixed = data.SMOLLM2_LAYERS
    if args.smoke:
        concepts, questions, tokens, fixed = concepts[:2], questions[:2], 6, (0, 1)
    settings = data.select_settings(args.settings, fixed)

    def log(msg: str) -> None:
        print(msg, flush=True)

    model, tok, model_name = load_model(args.smoke)
    from steerformer.prompts import PROBE_QUESTIONS

    header = {"model": model_name, "half": args.half, "questions": questions, "tokens": tokens,
              "probe_questions": list(PROBE_QUESTIONS[:PROBE_N]), "probe_tokens": PROBE_TOKENS,
              "concepts": [dataclasses.asdict(c) for c in concepts],
              "settings": [dataclasses.asdict(s) for s in settings]}
    out.mkdir(parents=True, exist_ok=True)
    check_run(out, header)
    answers_path, facts_path = out / "answers.jsonl", out / "settings.jsonl"
    facts = data.read_jsonl(facts_path) if facts_path.exists() else []
    done = {(f["setting"], f["concept"]) for f in facts}
    if answers_path.exists():  # drop the answers of a unit cut short (its facts line never came)
        rows = data.read_jsonl(answers_path)
        kept = [r for r in rows if (r["setting"], r["concept"]) in done]
        if len(kept) != len(rows):
            log(f"dropping {len(rows) - len(kept)} answers of unfinished units")
            data.write_jsonl(answers_path, kept)
    units = [(c, s) for c in concepts for s in settings if (s.name, c.name) not in done]
    log(f"{model_name}: {len(concepts)} {args.half} concepts x {len(settings)} settings x {len(questions)} questions; "
        f"{len(done)} units done, {len(units)} to go -> {out}")
    if not units:
        return summarize(out)
    measure = Measure(model, tok, questions, tokens)
    from steerformer.steering import edits_applied
    from steerformer.steering.evaluation.evaluate import chat_rows

    base_answers = None
    n = 0
    for concept in concepts:
        todo = [s for s in settings if (s.name, concept.name) not in done]
        if not todo:
            continue
        work = ConceptWork(model, tok, concept, measure, log)
        for setting in todo:
            n += 1
            kind, what, info = plan(setting, work)
            if kind == "base":
                if base_answers is None:
                    base_answers = measure.answers()  # the unsteered model: KL 0, its own greedy answers
                got, pk = base_answers, {"mean": 0.0, "p95": 0.0, "max": 0.0}
            elif kind == "prompt":
                rows = chat_rows(tok, [what.format(question=q, description=concept.description) for q in questions])
                probe_rows = chat_rows(tok, [what.format(question=q, description=concept.description)
                                             for q in measure.probe.questions])
                got, pk = measure.answers(rows), measure.probe_kl(probe_rows)
            elif kind == "context":
                with what():
                    pk = measure.probe_kl()
                    got = measure.answers()
            else:
                with edits_applied(model, what):
                    pk = measure.probe_kl()
                    got = measure.answers()
            row = {"setting": setting.name, "family": setting.family, "concept": concept.name,
                   "description": concept.description, "probe_kl": pk["mean"], "probe_kl_p95": pk["p95"],
                   "probe_kl_max": pk["max"], "answer_kl": got["kl"], **info}
            if "kl_probe_search" in row and abs(row["kl_probe_search"] - pk["mean"]) > 1e-6 and kind != "context":
                log(f"  note: {setting.name}/{concept.name}: probe KL {pk['mean']:.6f} here, "
                    f"{row['kl_probe_search']:.6f} in the gain search")
            data.append_jsonl(answers_path, [
                {"setting": setting.name, "concept": concept.name, "question_index": i, "question": q,
                 "answer": text, "n_tokens": len(ids), "answer_kl": kl}
                for i, (q, text, ids, kl) in enumerate(zip(questions, got["texts"], got["ids"], got["kl_each"]))])
            data.append_jsonl(facts_path, [row])
            where = (f"layers {row['layers']}, " if "layers" in row else "") + \
                (f"alpha {row['alpha']:.4g}, " if row.get("alpha") is not None else "")
            log(f"[{n}/{len(units)}] {concept.name} {setting.name}: {where}probe KL {pk['mean']:.3f} "
                f"(p95 {pk['p95']:.2f}), answer KL {got['kl']:.3f} | {got['texts'][0][:70]!r}")
    return summarize(out)


def summarize(out: Path) -> int:
    """The mean probe KL and answer KL of each setting over the run's concepts (a markdown table)."""
    facts = data.read_jsonl(out / "settings.jsonl")
    by: dict[str, list[dict]] = {}
    for f in facts:
        by.setdefault(f["setting"], []).append(f)
    print(f"\n{out}: {len(facts)} (setting, concept) units")
    print("| setting | concepts | layers | mean alpha | mean probe KL | mean probe p95 | mean answer KL |")
    print("|---|---|---|---|---|---|---|")
    for name, fs in by.items():
        layers = sorted({k for f in fs for k in f.get("layers", [])})
        alphas = [f["alpha"] for f in fs if f.get("alpha") is not None]
        mean = lambda k: sum(f[k] for f in fs) / len(fs)  # noqa: E731
        print(f"| {name} | {len(fs)} | {layers or '-'} | {data.fmt(sum(alphas) / len(alphas) if alphas else None)} | "
              f"{mean('probe_kl'):.3f} | {mean('probe_kl_p95'):.2f} | {mean('answer_kl'):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
