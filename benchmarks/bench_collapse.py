"""Cost of the looped-model collapse measurement against the model's own forward.

For a tiny and a GPT-2-small-sized random GPT-2 (built from configs, eager attention), prints
per-pass time of ``steerformer.collapse`` (all blocks with their masks, E / pairwise / centroid
statistics after every block, final norm) divided by a bare forward of the same batch through
the same model (target <= 1.10), and the resident memory after the 2nd and the last pass (it must
not grow with the number of passes).

    PYTHONPATH=. python benchmarks/bench_collapse.py [--passes 12] [--threads 1] [--device cpu] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

import torch
from transformers import GPT2Config, GPT2Model

from steerformer.collapse import collapse

sys.path.insert(0, os.path.dirname(__file__))
from _common import SMOKE_HELP  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def bench(name: str, config: GPT2Config, n_prompts: int, length: int, passes: int, device: str) -> None:
    torch.manual_seed(0)
    model = GPT2Model(config).eval().to(device)
    ids = torch.randint(0, config.vocab_size, (n_prompts, length), device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def bare_forward() -> float:
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            model(ids, use_cache=False)
        sync()
        return time.perf_counter() - t

    bare_forward()  # warm-up
    # Interleaved: after every collapse pass (inside its callback, outside the pass's timing) one
    # bare forward, so both see the same machine load.
    bare, per_pass, mem = [], [], {}
    clock = {"start": time.perf_counter()}

    def on_pass(p: int, arrays) -> None:  # the arrays are on the host: the pass has finished
        per_pass.append(time.perf_counter() - clock["start"])
        mem[p + 1] = rss_mib()
        if device.startswith("cuda"):
            mem[f"cuda{p + 1}"] = torch.cuda.max_memory_allocated() / 2**20
        bare.append(bare_forward())
        clock["start"] = time.perf_counter()

    collapse(model, token_ids=ids, passes=passes, on_pass=on_pass)
    per_pass = per_pass[1:]  # pass 1 also embeds and builds the masks
    ratio = statistics.median(per_pass) / statistics.median(bare)
    print(f"{name:>11}: batch {n_prompts}x{length}, {config.n_layer} blocks, d={config.n_embd}, {device}, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"             bare forward {statistics.median(bare) * 1e3:8.2f} ms | collapse pass "
          f"{statistics.median(per_pass) * 1e3:8.2f} ms | ratio {ratio:.3f} (target <= 1.10)")
    line = f"             RSS after pass 2: {mem[2]:.0f} MiB, after pass {passes}: {mem[passes]:.0f} MiB"
    if device.startswith("cuda"):
        line += f"; CUDA peak after pass 2: {mem['cuda2']:.0f} MiB, after pass {passes}: {mem[f'cuda{passes}']:.0f} MiB"
    print(line + f"; process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    common = dict(attn_implementation="eager", vocab_size=50257)
    tiny = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=256, **common)
    if args.smoke:
        bench("tiny", tiny, n_prompts=4, length=16, passes=3, device=args.device)
        return
    bench("tiny", tiny, n_prompts=100, length=200, passes=args.passes, device=args.device)
    bench("gpt2-small", GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, **common),
          n_prompts=4, length=128, passes=args.passes, device=args.device)


if __name__ == "__main__":
    main()
