"""Foundation benchmark (issues 2 and 14) on a gpt2-medium-sized random checkpoint (24 layers, d=1024).

(a) layer_matrices + spectra (one process, workers=1) ÷ bare numpy.linalg.eig on the same 24
    matrices, alternated round by round (issue 14 target ≤ 1.10)
(b) peak RSS of lazy extraction ÷ peak RSS of AutoModel.from_pretrained + touching every weight (≤ 0.5)
(c) end-to-end `steerformer analyze` wall time
(d) spectra of the 24 layers with 2 workers ÷ 1 worker, alternated (issue 14 target ≤ 0.65)
(e) peak RSS of the power-method statistics (`analyze` with statistics) on the same model

Run: python benchmarks/bench_analyze.py [--parts a,b,c,d,e] [--rounds 2] [--smoke]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import CLI, SMOKE_HELP, gpt2_medium_random, peak_rss_mib, tiny_gpt2  # noqa: E402


def main() -> None:
    import argparse

    import numpy as np
    import torch

    from steerformer import layer_matrices, spectra

    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="a,b,c,d")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP + " (parts a and d on a 4-layer d=64 GPT-2)")
    args = ap.parse_args()
    parts = {"a", "d"} if args.smoke else set(args.parts.split(","))
    rounds = 1 if args.smoke else args.rounds
    path = tiny_gpt2(n_layer=4) if args.smoke else gpt2_medium_random()
    print(f"checkpoint: {path} ({sum(f.stat().st_size for f in path.glob('*.safetensors')) / 2**20:.0f} MiB), "
          f"torch threads={torch.get_num_threads()}, load {os.getloadavg()}", flush=True)
    F = layer_matrices(path).matrices
    np.linalg.eig(F[0].numpy())  # warm-up: thread pool, workspace

    def bare() -> float:
        t = time.perf_counter()
        for k in range(F.shape[0]):
            np.linalg.eig(F[k].numpy())
        return time.perf_counter() - t

    if "a" in parts:
        # (a) alternated: bare, ours, bare, ours, ... so a drift in load shows as a spread, not a bias.
        t_bare, t_ours = [], []
        for _ in range(rounds):
            t_bare.append(bare())
            t = time.perf_counter()
            spectra(layer_matrices(path), workers=1)
            t_ours.append(time.perf_counter() - t)
        print(f"(a) layer_matrices + spectra {sum(t_ours):.1f} s ({', '.join(f'{x:.1f}' for x in t_ours)}); "
              f"bare numpy.linalg.eig {sum(t_bare):.1f} s ({', '.join(f'{x:.1f}' for x in t_bare)}); "
              f"ratio = {sum(t_ours) / sum(t_bare):.3f}  (target <= 1.10); load {os.getloadavg()}", flush=True)

    if "d" in parts:
        t1, t2 = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            one = spectra(F, workers=1)
            t1.append(time.perf_counter() - t)
            t = time.perf_counter()
            two = spectra(F, workers=2)
            t2.append(time.perf_counter() - t)
        # Workers run BLAS single-threaded: equal to rounding, not bitwise, to a 2-thread run.
        same = float((one.eigenvalues - two.eigenvalues).abs().max() / one.spectral_radius.max())
        print(f"(d) spectra {F.shape[0]} layers: 2 workers {sum(t2):.1f} s ({', '.join(f'{x:.1f}' for x in t2)}), 1 worker "
              f"{sum(t1):.1f} s ({', '.join(f'{x:.1f}' for x in t1)}): ratio = {sum(t2) / sum(t1):.3f}  "
              f"(target <= 0.65); max |Δλ|/ρ {same:.1e}; load {os.getloadavg()}", flush=True)

    if "e" in parts:
        rss = peak_rss_mib(f"""
            from steerformer.analyze import analyze
            r = analyze({str(path)!r}, workers=1)
        """)
        print(f"(e) peak RSS of analyze with statistics (24 layers, d=1024, defaults): {rss:.0f} MiB", flush=True)

    if "b" not in parts and "c" not in parts:
        return
    # (b) peak RSS, each in a fresh process.
    lazy = peak_rss_mib(f"""
        from steerformer import layer_matrices
        m = layer_matrices({str(path)!r})
    """)
    full = peak_rss_mib(f"""
        import torch
        from transformers import AutoModel
        m = AutoModel.from_pretrained({str(path)!r})
        s = sum(float(p.sum()) for p in m.parameters())  # touch every weight
    """)
    print(f"(b) peak RSS lazy {lazy:.0f} MiB, full model {full:.0f} MiB: ratio = {lazy / full:.3f}  (target <= 0.5)")

    # (c) end-to-end CLI.
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        subprocess.run([*CLI, "analyze", str(path), "--out", out, "--spectra-only"],
                       check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        print(f"(c) end-to-end `steerformer analyze` (spectra, figures): {time.perf_counter() - t:.1f} s wall")


if __name__ == "__main__":
    main()
