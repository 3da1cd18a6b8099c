"""The offline judge's calibration (docs/math.md §5d, docs/steering-chat.md "The judge"): base answers
and steered answers of SmolLM2 — the default ``steer`` at a few KL budgets, and activation addition
at high coefficients for broken text — with the numbers each rule of ``steering/evaluation/judge.py`` reads:
the answer's NLL under the base model after an empty user turn (per answer), MiniLM similarities,
the repetition share, and (once ``--rate FILE`` holds hand ratings) how the rules agree with them.

Run:  python benchmarks/judge_calibration.py --out runs/judge-cal            (collect, minutes)
      python benchmarks/judge_calibration.py --out runs/judge-cal --table    (the rules on what was collected)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def collect(out: Path, concepts: list[str], budgets: list[float], coeffs: list[float], n_q: int, n_tok: int,
            smoke: bool = False) -> None:
    import torch

    import steerformer as sf
    from steerformer.loading import load_tokenizer
    from steerformer.steering.methods.addition.calibrate import addition_vectors
    from steerformer.steering.evaluation.evaluate import HELDOUT_QUESTIONS, Baseline, answer_logprobs, generate_answers

    torch.set_num_threads(1)
    model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")
    tok = load_tokenizer(sf.BUNDLED_SMOLLM2)
    base = Baseline.of(model, tok, HELDOUT_QUESTIONS[:n_q], max_new_tokens=n_tok)

    def nll_each(prompts, answers):
        lps = answer_logprobs(model, prompts, answers)
        return [float(-lp[torch.arange(len(a)), torch.as_tensor(a)].sum() / len(a)) if a else float("nan")
                for lp, a in zip(lps, answers)]

    rows = []

    def add(concept, method, answers):
        free = nll_each(base.free_prompts, answers)  # the base model, unsteered
        ctx = nll_each(base.prompts, answers)
        for i, a in enumerate(answers):
            rows.append({"concept": concept, "method": method, "question": base.questions[i],
                         "base_answer": base.texts[i], "answer": tok.decode(a, skip_special_tokens=True),
                         "n_tokens": len(a), "nll_free": free[i], "nll": ctx[i]})

    add(None, "base", base.answers)
    for concept in concepts:
        for b in budgets:
            t0 = time.perf_counter()
            kw = {"layer": 19, "prompts": ["How do I clean a laptop keyboard?"]} if smoke else {}
            rec = sf.steer(model, token=concept, tokenizer=tok, max_kl=b, report=False, **kw)
            with torch.no_grad():
                ans = generate_answers(model, tok, base.prompts, max_new_tokens=n_tok)
            sf.unsteer(model)
            add(concept, f"steer max_kl={b} layer={rec.details.layers}", ans)
            print(f"{concept} budget {b}: {time.perf_counter() - t0:.0f} s", flush=True)
        layer = 19
        v = addition_vectors(model, tok, concept, [layer])
        for c in coeffs:
            with sf.activation_steering(model, v, coeff=c, positions="skip-first"), torch.no_grad():
                ans = generate_answers(model, tok, base.prompts, max_new_tokens=n_tok)
            add(concept, f"hook layer={layer} coeff={c}", ans)
            print(f"{concept} hook {c}", flush=True)
        (out / "answers.json").write_text(json.dumps({"base_nll_free": base.nll_free, "base_nll": base.nll,
                                                      "rows": rows}, indent=1))


def table(out: Path, rate_file: Path | None) -> None:
    """Each answer's features and the offline rules' rating; with ``rate_file`` (JSON: a list of
    [row index, concept, relevance, fluency] read by hand), the agreement per axis."""
    from steerformer.steering.evaluation.judge import JudgeItem, OfflineJudge, summarize

    data = json.loads((out / "answers.json").read_text())
    rows = data["rows"]
    items = [JudgeItem(question=r["question"], answer=r["answer"], concept=r["concept"] or "ocean",
                       base_answer=r["base_answer"], nll_free=r["nll_free"], base_nll_free=data["base_nll_free"])
             for r in rows]
    judge = OfflineJudge()
    feats = judge.features(items)
    ratings = [judge.rate(f) for f in feats]
    (out / "features.json").write_text(json.dumps([{**r, **f, "rating": [x.concept, x.relevance, x.fluency]}
                                                   for r, f, x in zip(rows, feats, ratings)], indent=1))
    by_method: dict = {}
    for r, x in zip(rows, ratings):
        by_method.setdefault((r["concept"], r["method"]), []).append(x)
    print("| concept | answers | concept | relevance | fluency | aggregate | good |")
    print("|---|---|---|---|---|---|---|")
    for (c, m), xs in by_method.items():
        s = summarize(xs)
        print(f"| {c or '(base)'} {m} | {s['n']} | {s['concept']:.2f} | {s['relevance']:.2f} | {s['fluency']:.2f} | "
              f"{s['aggregate']:.2f} | {s['good']:.2f} |")
    if rate_file is not None:
        hand = json.loads(Path(rate_file).read_text())
        agree = {"concept": 0, "relevance": 0, "fluency": 0, "good": 0}
        for i, c, rel, flu in hand:
            x = ratings[i]
            agree["concept"] += (x.concept >= 1) == (c >= 1)
            agree["relevance"] += (x.relevance >= 1) == (rel >= 1)
            agree["fluency"] += (x.fluency >= 1) == (flu >= 1)
            agree["good"] += x.good == (c >= 1 and rel >= 1 and flu >= 1)
        print(f"agreement ratio with {len(hand)} hand ratings (>= 1 or not): " +
              ", ".join(f"{k} {v / len(hand):.2f}" for k, v in agree.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one concept, one budget, one coefficient, 2 questions, "
                    "6 tokens (a temporary folder)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--concepts", default="ocean,music,coffee")
    ap.add_argument("--budgets", default="0.15,0.3,0.6")
    ap.add_argument("--coeffs", default="0.4,0.8")
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--table", action="store_true", help="rate what was collected with the offline rules")
    ap.add_argument("--rate", default=None, help="hand ratings: JSON [[row, concept, relevance, fluency], ...]")
    args = ap.parse_args()
    if args.smoke:
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="judge-cal-"))
        collect(out, ["ocean"], [0.3], [0.4], 2, 6, smoke=True)
        n = len(json.loads((out / "answers.json").read_text())["rows"])
        (out / "hand.json").write_text(json.dumps([[i, 0, 2, 2] for i in range(n)]))
        table(out, out / "hand.json")
        return
    if args.out is None:
        ap.error("--out is required (or --smoke)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.table:
        table(out, args.rate)
    else:
        collect(out, args.concepts.split(","), [float(b) for b in args.budgets.split(",")],
                [float(c) for c in args.coeffs.split(",")], args.questions, args.tokens)


if __name__ == "__main__":
    main()
