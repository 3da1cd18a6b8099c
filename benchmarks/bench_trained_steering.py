"""The trained steering edit (``steering/methods/trained.py``) on SmolLM2-135M-Instruct, judged on the
REPORT questions it never saw, against the DiffMean hook (activation addition at the same layer).

Per concept: data generated on TRAIN questions under strong run-time steering and filtered by the
offline judge; the edit trained (SFT + RePS + KL to the base); its strength chosen on the SELECTION
questions; then, on the REPORT questions (greedy, 40 tokens): good-steer share, aggregate, the
three ratings, KL (teacher-forced on the base answers), fluency (free), and the hook at a few
coefficients. Prints the table and the seconds of data + training per concept (with the load).

Run:  python benchmarks/bench_trained_steering.py [--concepts ocean,music] [--out runs/trained]
      python benchmarks/bench_trained_steering.py --smoke    (a tiny random Llama: trains and undoes, seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONCEPTS = ("ocean", "music", "coffee", "dragon", "mountain")


def load_avg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def smoke() -> None:
    import hashlib

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from steerformer.steering.methods.trained import Example, train_edit

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64, max_position_embeddings=64, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(0)
    ex = [Example(prompt=torch.randint(3, 64, (5,), generator=g).tolist(), positive=[7, 8, 9, 10],
                  negative=torch.randint(3, 64, (4,), generator=g).tolist(), question=f"q{i}") for i in range(4)]
    before = hashlib.sha256(model.model.layers[1].mlp.down_proj.weight.detach().numpy().tobytes()).hexdigest()
    edits, info = train_edit(model, None, ex, layers=[1], steps=5, objective="sft+reps", progress=False)
    for e in edits:
        e.apply(model)
    for e in reversed(edits):
        e.remove(model)
    after = hashlib.sha256(model.model.layers[1].mlp.down_proj.weight.detach().numpy().tobytes()).hexdigest()
    import time

    ids = torch.tensor([e.prompt + e.positive for e in ex])
    t0 = time.perf_counter()
    with torch.no_grad():  # the baseline, in the same run: one forward pass over the same examples
        model(input_ids=ids)
    forward = time.perf_counter() - t0
    print(json.dumps({"smoke": True, "loss_first": info["history"][0]["loss"], "loss_last": info["history"][-1]["loss"],
                      "undo_bit_exact": before == after, "seconds": info["seconds"]}))
    print(f"ratio training s / one forward pass over the examples: {info['seconds'] / max(forward, 1e-9):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--concepts", default=",".join(CONCEPTS))
    ap.add_argument("--report", type=int, default=8, help="report questions (the first N of evaluate.REPORT_QUESTIONS)")
    ap.add_argument("--hook-coeffs", default="0.15,0.2,0.25")
    # 1 thread: on a shared, oversubscribed machine two OpenMP threads wait on each other (measured: a
    # run with 2 threads made no progress in 24 min where 1 thread had generated its data in 10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--layers", default=None)
    ap.add_argument("--objective", default=None)
    ap.add_argument("--kl-weight", type=float, default=None)
    ap.add_argument("--gains", default=None)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        smoke()
        return

    import torch

    import steerformer as sf
    from steerformer.loading import load_tokenizer
    from steerformer.steering.activation import edits_applied
    from steerformer.steering.methods.addition.calibrate import addition_vectors
    from steerformer.steering.evaluation.evaluate import Baseline, evaluate_steering
    from steerformer.steering.methods.trained import REPORT_QUESTIONS, TrainedConfig, trained_steering

    torch.set_num_threads(args.threads)
    model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")
    tok = load_tokenizer(sf.BUNDLED_SMOLLM2)
    report = Baseline.of(model, tok, list(REPORT_QUESTIONS[:args.report]))
    out = Path(args.out) if args.out else None
    rows = []
    for concept in args.concepts.split(","):
        kw: dict = {"concept": concept}
        if args.steps:
            kw["steps"] = args.steps
        if args.layers:
            kw["layers"] = tuple(int(x) for x in args.layers.split(","))
        if args.objective:
            kw["objective"] = args.objective
        if args.kl_weight is not None:
            kw["kl_weight"] = args.kl_weight
        if args.gains:
            kw["gains"] = tuple(float(x) for x in args.gains.split(","))
        config = TrainedConfig(**kw)
        load_before = load_avg()
        edits, info = trained_steering(model, tok, config, progress=not args.quiet)
        layer = config.layers[-1]
        vec = addition_vectors(model, tok, concept, [layer])
        coeffs = [float(c) for c in args.hook_coeffs.split(",")]
        ev = evaluate_steering(
            model, tok, {"trained": lambda s: edits_applied(model, edits),
                         f"DiffMean hook, layer {layer}": lambda c: sf.activation_steering(
                             model, vec, coeff=c, positions="skip-first")},
            {"trained": [None], f"DiffMean hook, layer {layer}": coeffs}, concept=concept, baseline=report)
        if out is not None:
            ev.save(out / concept)
        tr = ev.points[0]
        hooks = ev.points[1:]
        near = [h for h in hooks if abs(h.kl - tr.kl) <= 0.1 * tr.kl] or \
            [min(hooks, key=lambda h: abs(h.kl - tr.kl))]
        hook = max(near, key=lambda h: (h.good, h.aggregate))
        row = {"concept": concept, "good": tr.good, "aggregate": tr.aggregate, "concept_r": tr.judge_concept,
               "relevance": tr.judge_relevance, "fluency_r": tr.judge_fluency, "kl": tr.kl,
               "fluency_free": tr.fluency_free, "concept_rate": tr.concept_rate, "gain": info["gain"],
               "train_s": info["seconds_train"], "total_s": info["seconds_total"], "load": f"{load_before} -> {load_avg()}",
               "n_examples": info["n_examples"], "accepted": info["generation"].get("accepted"),
               "hook": {"coeff": hook.strength, "kl": hook.kl, "good": hook.good, "aggregate": hook.aggregate},
               "hooks": [{"coeff": h.strength, "kl": h.kl, "good": h.good, "aggregate": h.aggregate,
                          "fluency_free": h.fluency_free} for h in hooks],
               "selection": info["selection"], "data_sha256": info["data_sha256"],
               "answers": list(zip(report.texts, tr.answers))[:4],
               "history": [info["history"][0], info["history"][-1]]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out is not None:
            (out / concept).mkdir(parents=True, exist_ok=True)
            (out / concept / "trained.json").write_text(json.dumps({**row, "info": {
                k: v for k, v in info.items() if k != "history"}}, indent=1, default=str))
    print(f"base fluency_free 1.00 by definition; report questions: {args.report}; load now {load_avg()}")
    print("| concept | good | aggregate | concept / relevance / fluency | KL | fluency (free) | gain | train s "
          "| DiffMean hook at ±10% KL: coeff, KL, good, aggregate |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        h = r["hook"]
        print(f"| {r['concept']} | {r['good']:.2f} | {r['aggregate']:.2f} | {r['concept_r']:.2f} / {r['relevance']:.2f} / "
              f"{r['fluency_r']:.2f} | {r['kl']:.3f} | {r['fluency_free']:.2f} | {r['gain']} | {r['train_s']:.0f} "
              f"| {h['coeff']}, {h['kl']:.3f}, {h['good']:.2f}, {h['aggregate']:.2f} |")
    if rows:
        n = len(rows)
        print(f"mean: good {sum(r['good'] for r in rows) / n:.2f}, aggregate {sum(r['aggregate'] for r in rows) / n:.2f}, "
              f"KL {sum(r['kl'] for r in rows) / n:.3f}")


if __name__ == "__main__":
    t0 = time.time()
    main()
