"""Per-layer eig time on CPU vs GPU (issue 14 item 6): the same random d × d layer matrices through
steerformer's dense path (steerformer.eig.dense_eig: the measured CPU LAPACK; torch.linalg.eig on
CUDA), and the agreement of λ1.

    python benchmarks/gpu_eig.py [--d 1024 2048 4096] [--layers 3] [--smoke]

Also the solver steerformer picks per size (``eig.solver_device``: CUDA from ``CUDA_EIG_FROM`` on)
and its time ÷ the faster of the two: the measurement that places that threshold.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import SMOKE_HELP  # noqa: E402


def main() -> None:
    import numpy as np
    import torch

    from steerformer.eig import CPU_BACKEND, CUDA_EIG_FROM, dense_eig
    from steerformer.errors import SteerformerError

    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args()
    if a.smoke:
        a.d, a.layers = [32, 48], 1
    card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    print(f"CPU backend {CPU_BACKEND[torch.float64]}, torch {torch.__version__}, GPU: {card}")
    for d in a.d:
        rng = np.random.default_rng(d)
        Fs = [torch.from_numpy(rng.standard_normal((d, d)) / np.sqrt(d)) for _ in range(a.layers)]
        t = time.perf_counter()
        cpu = [dense_eig(F) for F in Fs]
        t_cpu = (time.perf_counter() - t) / a.layers
        line = f"d={d}: CPU {t_cpu:.2f} s/layer"
        try:
            dense_eig(Fs[0], device="cuda")  # warm-up (cuSOLVER/MAGMA handles)
            torch.cuda.synchronize()
            t = time.perf_counter()
            gpu = [dense_eig(F, device="cuda") for F in Fs]
            torch.cuda.synchronize()
            t_gpu = (time.perf_counter() - t) / a.layers
            top = lambda w: w[torch.argmax(w.real)].item()  # noqa: E731
            err = max(abs(top(c[0]) - top(g[0].cpu())) for c, g in zip(cpu, gpu))
            picked = t_gpu if d >= CUDA_EIG_FROM else t_cpu
            line += (f", GPU {t_gpu:.3f} s/layer, CPU/GPU = {t_cpu / t_gpu:.1f}x, max |Δλ1| {err:.1e}; steerformer "
                     f"solves d={d} on the {'GPU' if d >= CUDA_EIG_FROM else 'CPU'}: ratio to the faster "
                     f"{picked / min(t_cpu, t_gpu):.2f}")
        except SteerformerError as exc:  # no GPU: the baseline is the CPU run itself
            line += f", GPU: {exc}; ratio to the CPU run 1.00"
        print(line, flush=True)


if __name__ == "__main__":
    main()
