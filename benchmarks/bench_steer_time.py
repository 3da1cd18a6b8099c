"""The time of the default ``steer`` on a chat model in memory (issue 40: <= 30 s end to end on SmolLM2
on an idle 2-core machine; the whole command with its start, load and save: bench_steer_phases.py),
beside one forward pass over the probe prompts: seconds and their ratio, per concept, with the layer
and the KL it chose.

Run:  python benchmarks/bench_steer_time.py [--concepts ocean,music] [--threads 2]
      python benchmarks/bench_steer_time.py --smoke     (seconds: tiny random Llama, one concept)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a tiny random Llama, one concept")
    ap.add_argument("--concepts", default="ocean,music")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    concepts = [c.strip() for c in args.concepts.split(",") if c.strip()]
    if not concepts:
        ap.error(f"--concepts {args.concepts!r}: give at least one concept word")

    import torch

    import steerformer as sf
    from bench_chat_steering import load, tiny_llama
    from steerformer.steering.methods.addition.calibrate import ContinuationProbe

    torch.set_num_threads(args.threads)
    model, tok = tiny_llama() if args.smoke else load(None)
    concepts = concepts[:1] if args.smoke else concepts
    kw = {"layer": sf.open_source(model).adapter.n_layers - 1} if args.smoke else {}
    probe = ContinuationProbe.of(model, sf.open_source(model).adapter, tok)
    with torch.no_grad():
        model(**probe.batch.inputs())  # warm
        t0 = time.perf_counter()
        model(**probe.batch.inputs())
        t_fwd = time.perf_counter() - t0
    print(f"one forward pass over the probe prompts ({tuple(probe.batch.input_ids.shape)} tokens): {t_fwd:.3f} s")
    print("| concept | default steer s | ratio to one forward | layer | probe KL |")
    print("|---|---|---|---|---|")
    for c in concepts:
        t0 = time.perf_counter()
        rec = sf.steer(model, token=c, tokenizer=tok, report=False, **kw)
        seconds = time.perf_counter() - t0
        sf.unsteer(model)
        print(f"| {c} | {seconds:.1f} | {seconds / t_fwd:.0f} | {rec.details.layers} | {rec.kl:.3f} |", flush=True)


if __name__ == "__main__":
    main()
