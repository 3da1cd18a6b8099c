"""The offline judge's calibration (docs/math.md §5d, docs/steering-chat.md "The judge"): base answers
and steered answers of SmolLM2 — the default ``steer`` at a few KL budgets, and activation addition
at high coefficients for broken text — with the numbers each rule of ``steering/judge.py`` reads:
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


def collect(out: Path, concepts: list[str], budgets: list[float], coeffs: list[float], n_q: int, n_tok: int) -> None:
    import torch

    import steerformer as sf
    from steerformer.loading import load_tokenizer
    from steerformer.steering import edits_applied
    from steerformer.steering.calibrate import addition_vectors
    from steerformer.steering.evaluate import HELDOUT_QUESTIONS, Baseline, answer_logprobs, generate_answers

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
            rec = sf.steer(model, token=concept, tokenizer=tok, max_kl=b, report=False)
            with torch.no_grad():
                ans = generate_answers(model, tok, base.prompts, max_new_tokens=n_tok)
            sf.unsteer(model)
            add(concept, f"steer max_kl={b} layer={rec.calibration['layers']}", ans)
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
    del edits_applied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--concepts", default="ocean,music,coffee")
    ap.add_argument("--budgets", default="0.15,0.3,0.6")
    ap.add_argument("--coeffs", default="0.4,0.8")
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--table", action="store_true", help="rate what was collected with the offline rules")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table:
        collect(out, args.concepts.split(","), [float(b) for b in args.budgets.split(",")],
                [float(c) for c in args.coeffs.split(",")], args.questions, args.tokens)


if __name__ == "__main__":
    main()
