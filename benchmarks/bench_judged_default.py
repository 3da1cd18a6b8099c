"""The default ``steer``'s layer chosen by the judge on selection questions, against today's choice by
the concept tokens' probability (docs/math.md §5d, "Selection and report"; docs/steering-chat.md):
both from one probe and one scan at the default budget (``kl_curve``), both reported on the report
questions with the offline judge — concept rate, the three ratings, the aggregate, good steers,
KL on the report answers — and the time of the calibration ÷ one forward pass over the probe.

Run:  python benchmarks/bench_judged_default.py [--concepts ocean,music,coffee,dragon,mountain] [--out runs/judged]
      python benchmarks/bench_judged_default.py --smoke      (one concept, 2 report questions, 6 tokens)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--concepts", default="ocean,music,coffee,dragon,mountain")
    ap.add_argument("--questions", type=int, default=16, help="report questions (of 16)")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--max-kl", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch

    import steerformer as sf
    from steerformer.loading import load_tokenizer
    from steerformer.steering import edits_applied, kl_curve
    from steerformer.steering.methods.addition.calibrate import ContinuationProbe
    from steerformer.steering.evaluation.evaluate import PROBE_QUESTIONS, REPORT_QUESTIONS, Baseline, evaluate_steering

    torch.set_num_threads(args.threads)
    concepts = args.concepts.split(",")[:1] if args.smoke else args.concepts.split(",")
    n_q, n_tok = (2, 6) if args.smoke else (args.questions, args.tokens)
    model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")
    tok = load_tokenizer(sf.BUNDLED_SMOLLM2)
    probe = ContinuationProbe.of(model, sf.open_source(model).adapter, tok)
    with torch.no_grad():
        t0 = time.perf_counter()
        model(**probe.batch.inputs())
        t_fwd = time.perf_counter() - t0
    base = Baseline.of(model, tok, REPORT_QUESTIONS[:n_q], max_new_tokens=n_tok)
    rows, evs = [], {}
    for c in concepts:
        t0 = time.perf_counter()
        curve = kl_curve(model, [args.max_kl], token=c, tokenizer=tok, max_kl=args.max_kl,
                         **({"prompts": PROBE_QUESTIONS[:2], "layers": [19]} if args.smoke else {}))
        t_cal = time.perf_counter() - t0
        scan = curve["scan"]
        today = max(scan, key=lambda r: r["concept_mass"])
        judged = next(r for r in scan if r["layers"] == curve["layers"])
        methods = {f"today: concept-token layer {today['layers']}": lambda s, e=today["edits"]: edits_applied(model, e)}
        if judged is not today:
            methods[f"judged layer {judged['layers']}"] = lambda s, e=judged["edits"]: edits_applied(model, e)
        ev = evaluate_steering(model, tok, methods, concept=c, baseline=base)
        evs[c] = ev
        for p in ev.points:
            label = "today" if p.method.startswith("today") else "judged"
            row = {"concept": c, "choice": label, "layer": p.method.split("layer ")[-1], "rate": p.concept_rate,
                   "kl_report": p.kl, "concept": p.judge_concept, "relevance": p.judge_relevance,
                   "fluency": p.judge_fluency, "aggregate": p.aggregate, "good": p.good, "calibration_s": t_cal,
                   "ratio": t_cal / t_fwd, "kl_probe": (today if label == "today" else judged)["kl"],
                   "scan": [{k: r[k] for k in ("layers", "concept_mass", "kl")} | {"judged": r.get("judged")}
                            for r in scan]}
            row["concept_name"] = c
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "scan"}), flush=True)
        if judged is today:  # the same layer: the judged choice is today's
            rows.append({**rows[-1], "choice": "judged"})
        print(ev.summary(), flush=True)
        if args.out:
            ev.save(Path(args.out) / c)
    print("| concept | choice | layer | concept rate | concept | relevance | fluency | aggregate | good steers | "
          "KL (report answers) | KL (probe) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concept_name']} | {r['choice']} | {r['layer']} | {r['rate']:.2f} | {r['concept']:.2f} | "
              f"{r['relevance']:.2f} | {r['fluency']:.2f} | {r['aggregate']:.2f} | {r['good']:.2f} | "
              f"{r['kl_report']:.3f} | {r['kl_probe']:.3f} |")
    for choice in ("today", "judged"):
        rs = [r for r in rows if r["choice"] == choice]
        print(f"mean {choice}: good {sum(r['good'] for r in rs) / len(rs):.3f}, aggregate "
              f"{sum(r['aggregate'] for r in rs) / len(rs):.3f}, KL report {sum(r['kl_report'] for r in rs) / len(rs):.3f}")
    print(f"time ratio, calibration (probe + scan + judged choice) ÷ one forward over the probe: "
          f"{sum(r['ratio'] for r in rows) / len(rows):.1f} (forward {t_fwd:.2f} s)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "summary.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
