"""Benchmark of the rank-1 edit on a gpt2-medium-sized random model (24 layers, d = 1024, 355M
parameters, fp32), built once from its config into benchmarks/.cache/.

1. time of the edit itself (``steer(..., gain=..., solve="exact", report=False)``: read V and W_O
   of the last layer, one LU solve, write the weight back) ÷ time of one ``eig`` of F_L in
   float64 — target ≤ 1.2. The edit computes no eigendecomposition; spectrum reporting
   (ARPACK top eigenvalues) is timed separately and reported, not counted.
2. peak RSS of a fresh process that loads the checkpoint, edits it and saves it with
   ``save_steered`` ÷ checkpoint size — target ≤ 1.5. Measured in a fresh subprocess (VmHWM).

3. peak RSS of a fresh process that steers the checkpoint *lazily* (``steer_checkpoint``: reads
   only V and W_O of the last layer, copies every other file, streams the one shard holding the
   edited weight) ÷ checkpoint size — target ≤ 0.2. Printed with the same process's RSS right
   after its imports (the floor no streaming can go below: torch, transformers' config classes,
   steerformer) and the ratio of the work above that floor.

Run:  python benchmarks/bench_steer.py            (all three)
      python benchmarks/bench_steer.py --rss      (2 and 3: the in-memory path is the baseline)
      python benchmarks/bench_steer.py --smoke    (all three on a 2-layer d=64 GPT-2: the test suite runs it)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import gpt2_medium_random, peak_rss_mib, tiny_gpt2  # noqa: E402


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
    from steerformer.steering.methods.paper.algebra import top_summary

    model = load_model(path)
    d = model.config.n_embd
    u = torch.randn(d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    last = model.config.n_layer - 1
    F = read_attention_weights(open_source(model), [last], parts=("vo",))[last].layer_matrix()

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


LAZY_CHILD = r"""
import sys, tempfile, torch
sys.path.insert(0, sys.argv[2])
from steerformer.loading import open_source
from steerformer.steering import steer_checkpoint
source = open_source(sys.argv[1])  # config only
floor = [l for l in open("/proc/self/status") if l.startswith("VmRSS:")][0].split()[1]
print("__FLOOR__" + floor)
u = torch.randn(source.adapter.d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
with tempfile.TemporaryDirectory(dir=sys.argv[3]) as tmp:
    steer_checkpoint(sys.argv[1], tmp + "/out", u, gain=1.0, solve="exact")
"""


def peak_rss_lazy(path: Path) -> dict:
    import subprocess

    floor_kib: list[int] = []
    code = LAZY_CHILD + '\nimport json\nhwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]\n' \
        'print("__RSS__" + json.dumps(int(hwm) / 1024))\n'
    out = subprocess.run([sys.executable, "-c", code, str(path), str(ROOT), str(path.parent)], capture_output=True,
                         text=True, check=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    for line in out.stdout.splitlines():
        if line.startswith("__FLOOR__"):
            floor_kib.append(int(line[len("__FLOOR__"):]))
    peak = float([l for l in out.stdout.splitlines() if l.startswith("__RSS__")][-1][len("__RSS__"):]) * 2**20
    floor = floor_kib[-1] * 1024
    size = checkpoint_bytes(path)
    return {"lazy_peak_rss_gib": peak / 2**30, "lazy_import_floor_gib": floor / 2**30,
            "lazy_rss_over_checkpoint": peak / size, "lazy_rss_above_floor_over_checkpoint": (peak - floor) / size}


def main() -> None:
    path = tiny_gpt2() if "--smoke" in sys.argv[1:] else gpt2_medium_random()
    rss_only = "--rss" in sys.argv[1:]
    res = {**({} if rss_only else timing(path)), **peak_rss(path), **peak_rss_lazy(path)}
    print(json.dumps(res, indent=1))
    if not rss_only:
        print(f"ratio edit / eig(F_L): {res['edit_over_eig']:.3f} (target <= 1.2)")
    print(f"ratio in-memory edit+save peak RSS / checkpoint: {res['rss_over_checkpoint']:.3f} (target <= 1.5)")
    print(f"ratio lazy edit peak RSS / checkpoint: {res['lazy_rss_over_checkpoint']:.3f} (target <= 0.2); "
          f"above the import floor ({res['lazy_import_floor_gib'] * 1024:.0f} MiB): "
          f"{res['lazy_rss_above_floor_over_checkpoint']:.3f}")


if __name__ == "__main__":
    main()
