"""Benchmark of the rank-1 edit on a gpt2-medium-sized random model (24 layers, d = 1024, 355M
parameters, fp32), built once from its config into benchmarks/.cache/.

1. time of the edit itself (``steer(..., gain=..., solve="exact", report=False)``: read V and W_O
   of the last layer, one LU solve, write the weight back) ÷ time of one ``eig`` of F_L in
   float64 — target ≤ 1.2. The edit computes no eigendecomposition; spectrum reporting
   (ARPACK top eigenvalues) is timed separately and reported, not counted.
2. peak RSS of a fresh process that loads the checkpoint, edits it and saves it with
   ``save_steered`` ÷ checkpoint size — target ≤ 1.5. Measured in a fresh subprocess (VmHWM).

Run:  python benchmarks/bench_steer.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import gpt2_medium_random, peak_rss_mib  # noqa: E402


def checkpoint_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.safetensors"))


def best_of(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def timing(path: Path) -> dict:
    import torch

    from steerformer.loading import load_model, open_source
    from steerformer.matrices import read_attention_weights
    from steerformer.steering import steer, unsteer
    from steerformer.steering.spectrum import top_summary

    model = load_model(path)
    d = model.config.n_embd
    u = torch.randn(d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    F = read_attention_weights(open_source(model), [-1], parts=("vo",))[23].layer_matrix()

    def edit() -> None:
        steer(model, u, gain=1.0, solve="exact", report=False)
        unsteer(model)

    edit()  # warm-up (imports, LAPACK workspace)
    t_eig = best_of(lambda: torch.linalg.eig(F))
    t_edit = best_of(edit)
    t_top = best_of(lambda: top_summary(F), n=1)
    return {"edit_s": t_edit, "eig_s": t_eig, "edit_over_eig": t_edit / t_eig, "spectrum_report_s": t_top}


RSS_CHILD = r"""
import sys, tempfile, torch
sys.path.insert(0, sys.argv[2])
from steerformer.loading import load_model
from steerformer.steering import save_steered, steer
model = load_model(sys.argv[1])
u = torch.randn(model.config.n_embd, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
steer(model, u, gain=1.0, solve="exact", report=False)
with tempfile.TemporaryDirectory() as tmp:
    save_steered(model, tmp + "/out")
"""


def peak_rss(path: Path) -> dict:
    peak = peak_rss_mib(RSS_CHILD, str(path), str(ROOT)) * 2**20
    size = checkpoint_bytes(path)
    return {"peak_rss_gib": peak / 2**30, "checkpoint_gib": size / 2**30, "rss_over_checkpoint": peak / size}


def main() -> None:
    path = gpt2_medium_random()
    res = {**timing(path), **peak_rss(path)}
    print(json.dumps(res, indent=1))
    print(f"edit / eig(F_L): {res['edit_over_eig']:.3f} (target <= 1.2); "
          f"edit+save peak RSS / checkpoint: {res['rss_over_checkpoint']:.3f} (target <= 1.5)")


if __name__ == "__main__":
    main()
