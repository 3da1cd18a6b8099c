"""The distilled method (``steering/methods/distilled/``) on SmolLM2-135M-Instruct against the default
``sf.steer`` and against prompting with AxBench's wording, judged on the REPORT questions
(docs/steering-chat.md, "The distilled method").

Per concept: the base model's greedy 40-token answers to the REPORT questions; then each method's
answers to the same questions, scored by the offline judge (concept, relevance, fluency, aggregate =
AxBench's harmonic mean), with the KL of the next-token distributions on the base answers. The
distilled edit and its strength are chosen on TRAIN and SELECTION questions only; the default steer
chooses its layer and gain on the probe (SELECTION) questions. CPU seconds per method are measured
with ``resource.getrusage`` (the machine may be shared: wall time is not the cost).

Run:  python benchmarks/bench_distilled.py --concepts music,ocean,coffee [--out runs/distilled] [--steps 30]
      python benchmarks/bench_distilled.py --smoke   (a tiny random Llama, a stub judge)
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def scored(model, tok, baseline, concept, words, judge, answers_of, kl_of, label):
    """One method's AnswerScore on the report questions: answers_of() -> answer ids, kl_of() -> KL."""
    from steerformer.steering.evaluation.evaluate import AnswerScore, distinct2, fluency_of, judge_point, mentions

    kl = kl_of()
    ids = answers_of()
    texts = [tok.decode(a, skip_special_tokens=True) for a in ids]
    point = AnswerScore(method=label, strength=None, concept_rate=sum(mentions(texts, words)) / len(texts), kl=kl,
                        distinct2=distinct2(texts), fluency=float("nan"), fluency_free=float("nan"),
                        n_answers=len(texts), answers=texts, seconds=0.0)
    point.fluency, point.fluency_free = fluency_of(model, baseline, ids, point=point)  # the base model
    if judge is not None:
        judge_point(point, baseline, concept, words, judge)
    return point


def run_concept(model, tok, concept, args, judge, log):
    import steerformer as sf
    from steerformer.prompts import REPORT_QUESTIONS
    from steerformer.steering import edits_applied
    from steerformer.steering.chat import chat_rows, generate_answers
    from steerformer.steering.evaluation.evaluate import Baseline, answer_logprobs, mean_kl
    from steerformer.steering.evaluation.judge import concept_words
    from steerformer.steering.methods.distilled.config import AXBENCH_INSTRUCTION, DistilledConfig
    from steerformer.steering.methods.distilled.method import distilled_steering

    words = concept_words(concept)
    questions = list(REPORT_QUESTIONS[:args.report])
    baseline = Baseline.of(model, tok, questions, max_new_tokens=40)
    rows = {}

    def steered(edits):
        def answers():
            with edits_applied(model, edits):
                return generate_answers(model, tok, baseline.prompts, max_new_tokens=40)

        def kl():
            with edits_applied(model, edits):
                return mean_kl(baseline.logprobs, answer_logprobs(model, baseline.prompts, baseline.answers))
        return answers, kl

    # the default steer
    c0 = cpu_seconds()
    rec = sf.steer(model, token=concept, tokenizer=tok, progress=False)
    sf.unsteer(model)
    rows["steer (default)"] = (scored(model, tok, baseline, concept, words, judge, *steered(rec.edits), "steer"),
                               cpu_seconds() - c0)
    log(f"  {concept}: default steer done")
    # prompting with AxBench's wording (the judge sees the plain question)
    c0 = cpu_seconds()
    instructed = chat_rows(tok, [AXBENCH_INSTRUCTION.format(question=q, concept=concept) for q in questions])
    rows["prompt (AxBench wording)"] = (scored(
        model, tok, baseline, concept, words, judge,
        lambda: generate_answers(model, tok, instructed, max_new_tokens=40),
        lambda: mean_kl(baseline.logprobs, answer_logprobs(model, instructed, baseline.answers)), "prompt"),
        cpu_seconds() - c0)
    log(f"  {concept}: prompting done")
    # the distilled method (train + strength on SELECTION)
    c0 = cpu_seconds()
    layers = args.distilled.pop("layers", None)
    cfg = DistilledConfig(**args.distilled)
    edits, info = distilled_steering(model, tok, concept, cfg, judge=judge, progress=not args.quiet,
                                     layers=[int(k) for k in layers.split(",")] if layers else None)
    train_cpu = cpu_seconds() - c0
    rows["distilled"] = (scored(model, tok, baseline, concept, words, judge, *steered(edits), "distilled"), train_cpu)
    log(f"  {concept}: distilled done (x{info['gain']:g}, {train_cpu:.0f} CPU s)")
    return {name: {"aggregate": p.aggregate, "good": p.good, "concept": p.judge_concept,
                   "relevance": p.judge_relevance, "fluency": p.judge_fluency, "concept_rate": p.concept_rate,
                   "kl": p.kl, "cpu_seconds": cpu, "answers": p.answers[:4]}
            for name, (p, cpu) in rows.items()} | {"_distilled_info": {
                k: info[k] for k in ("gain", "selection", "layers", "rank", "steps", "objective", "data_sha256",
                                     "seconds_total", "loss_first", "loss_last")}}


def table(results: dict) -> str:
    names = [n for n in next(iter(results.values())) if not n.startswith("_")]
    fmt = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731
    lines = ["| method | aggregate | good | concept | relevance | fluency | KL | CPU s / concept |",
             "|---|---|---|---|---|---|---|---|"]
    for n in names:
        vals = [r[n] for r in results.values()]
        mean = lambda k: None if any(v[k] is None for v in vals) else sum(v[k] for v in vals) / len(vals)  # noqa: E731
        lines.append(f"| {n} | {fmt(mean('aggregate'))} | {fmt(mean('good'))} | {fmt(mean('concept'))} | "
                     f"{fmt(mean('relevance'))} | {fmt(mean('fluency'))} | {fmt(mean('kl'))} | "
                     f"{mean('cpu_seconds'):.0f} |")
    lines += ["", "| concept | " + " | ".join(f"{n} aggregate / KL" for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for c, r in results.items():
        lines.append(f"| {c} | " + " | ".join(f"{fmt(r[n]['aggregate'])} / {r[n]['kl']:.2f}" for n in names) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concepts", default="music,ocean,coffee")
    p.add_argument("--report", type=int, default=16, help="report questions used (the first N)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--layers", default=None)
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--gains", default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.distilled = {k: v for k, v in (("steps", args.steps), ("layers", args.layers), ("rank", args.rank),
                                        ("lr", args.lr), ("gains", args.gains)) if v is not None}
    log = (lambda m: None) if args.quiet else (lambda m: print(m, flush=True))
    import torch

    t0 = time.perf_counter()
    if args.smoke:
        from bench_chat_steering import stub_judge, tiny_llama

        model, tok = tiny_llama()
        judge, concepts = stub_judge, ["ocean"]
        args.report = 3
        args.distilled = {"steps": 2, "max_answer_tokens": 4, "gains": (1.0,)}
    else:
        import steerformer as sf
        from steerformer.loading import load_tokenizer
        from steerformer.steering.evaluation.judge import make_judge

        model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")
        tok = load_tokenizer(sf.BUNDLED_SMOLLM2)
        judge, concepts = make_judge("offline"), args.concepts.split(",")
    c0 = cpu_seconds()
    with torch.no_grad():
        model(torch.tensor([[1] * 64]))
    forward_cpu = max(cpu_seconds() - c0, 1e-3)
    results = {c: run_concept(model, tok, c, args, judge, log) for c in concepts}
    print(table(results))
    cpu = results[concepts[0]]["distilled"]["cpu_seconds"]
    print(f"distilled CPU seconds per concept ÷ one forward pass (64 tokens): ratio {cpu / forward_cpu:.0f} "
          f"({cpu:.0f} s / {forward_cpu:.3f} s); wall {time.perf_counter() - t0:.0f} s in all")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "distilled.json").write_text(json.dumps(results, indent=1, default=str))
        (args.out / "distilled.md").write_text(table(results) + "\n")


if __name__ == "__main__":
    main()
