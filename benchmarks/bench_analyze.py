"""Foundation benchmark (issue 2) on a gpt2-medium-sized random checkpoint (24 layers, d=1024).

(a) analyze's spectra time ÷ the sum of bare LAPACK eig times on the same 24 matrices (≤ 1.15)
(b) peak RSS of lazy extraction ÷ peak RSS of AutoModel.from_pretrained + touching every weight (≤ 0.5)
(c) end-to-end `steerformer analyze` wall time

Run: python benchmarks/bench_analyze.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import gpt2_medium_random, peak_rss_mib  # noqa: E402


def main() -> None:
    import scipy.linalg
    import torch

    from steerformer import layer_matrices, spectra

    path = gpt2_medium_random()
    print(f"checkpoint: {path} ({sum(f.stat().st_size for f in path.glob('*.safetensors')) / 2**20:.0f} MiB), "
          f"torch threads={torch.get_num_threads()}")

    # (a) spectra as analyze runs them vs bare eig calls on the same matrices, same process.
    # One warm-up eig first (thread pool, workspace), and the bare loop runs both before and after
    # ours so a drift in machine load shows up as a spread instead of a bias.
    F = layer_matrices(path).matrices
    torch.linalg.eig(F[0])

    def bare() -> tuple[float, float]:
        t_torch = t_scipy = 0.0
        for k in range(F.shape[0]):
            t = time.perf_counter()
            torch.linalg.eig(F[k])
            t_torch += time.perf_counter() - t
            A = F[k].numpy()
            t = time.perf_counter()
            scipy.linalg.eig(A)
            t_scipy += time.perf_counter() - t
        return t_torch, t_scipy

    before = bare()
    t = time.perf_counter()
    spectra(F)
    t_ours = time.perf_counter() - t
    after = bare()
    t_torch, t_scipy = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
    print(f"(a) spectra {t_ours:.2f} s; bare torch.linalg.eig sum {t_torch:.2f} s "
          f"(before {before[0]:.2f}, after {after[0]:.2f}; {t_torch / F.shape[0]:.2f} s/layer); "
          f"scipy.linalg.eig sum {t_scipy:.2f} s")
    print(f"(a) ratio spectra / bare torch eig = {t_ours / t_torch:.3f}  (target <= 1.15); "
          f"vs scipy eig = {t_ours / t_scipy:.3f}")

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
        subprocess.run(["steerformer", "analyze", str(path), "--out", out, "--spectra-only"]
                       if _has_spectra_only() else ["steerformer", "analyze", str(path), "--out", out],
                       check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        print(f"(c) end-to-end `steerformer analyze` (spectra, figures): {time.perf_counter() - t:.1f} s wall")


def _has_spectra_only() -> bool:
    out = subprocess.run(["steerformer", "analyze", "--help"], capture_output=True, text=True)
    return "--spectra-only" in out.stdout


if __name__ == "__main__":
    main()
