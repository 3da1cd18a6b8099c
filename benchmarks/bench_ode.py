"""Benchmark of steerformer.ode on the 5.1.2 setup (100 runs × 50 tokens × d = 500 × 2 heads, float64).

(a) one batched evaluation of the vector field ÷ the bare matrix products it needs
    (Y·P_η for all runs, one (runs·n, d) × (d, d) GEMM per head)            target ≤ 1.5
(b) the whole setup on t ∈ [0, T] with the batched adaptive Dormand–Prince 5(4) ÷ scipy.integrate.solve_ivp
    (RK45) one run at a time at the same rtol/atol                          target ≤ 0.5,
    final E of every run agreeing to 1e-6.

Usage: python benchmarks/bench_ode.py [--runs 100] [--t1 5] [--rtol 1e-8] [--scipy-runs N] [--smoke]
``--scipy-runs N`` < runs times scipy on the first N runs only and scales its time by runs/N
(said so in the output). Timings are medians over ``--repeats``; the host's load is printed
because a busy machine inflates every number.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
from scipy.integrate import solve_ivp

from steerformer.ode import AttentionField, consensus_error, random_tokens, solve_tokens
from steerformer.ode.experiments import p_512

sys.path.insert(0, os.path.dirname(__file__))
from _common import SMOKE_HELP  # noqa: E402


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up (allocator, thread pool)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--d", type=int, default=500)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--t1", type=float, default=5.0)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--atol", type=float, default=1e-10)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--scipy-runs", type=int, default=None)
    ap.add_argument("--method", default="dopri5", help="batched adaptive method (dopri5 or dop853)")
    ap.add_argument("--skip-b", action="store_true", help="only measure (a)")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.n, args.d, args.t1, args.repeats, args.scipy_runs = 2, 5, 8, 0.2, 1, 1

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cpus {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    g = torch.Generator().manual_seed(0)
    P = p_512(args.d, args.heads, g)
    y0 = random_tokens((args.runs, args.n, args.d), generator=g, distribution="uniform")
    field = AttentionField(P, causal=True)
    B, n, d = y0.shape

    # (a) ------------------------------------------------------------------------------------
    t_eval = 0.37
    Pt = P(t_eval)
    Yflat = y0.reshape(B * n, d)
    out = torch.empty(B * n, d, dtype=torch.float64)

    def gemms() -> None:
        for eta in range(args.heads):
            torch.mm(Yflat, Pt[eta], out=out)

    t_gemm = median_time(gemms, args.repeats)
    t_field = median_time(lambda: field(t_eval, y0), args.repeats)
    flops = 2 * B * n * d * d * args.heads
    print(f"(a) field evaluation {t_field * 1e3:.1f} ms, bare GEMMs Y·P_η {t_gemm * 1e3:.1f} ms "
          f"({flops / t_gemm / 1e9:.0f} GFLOP/s) -> ratio {t_field / t_gemm:.2f} (target <= 1.5)")
    if args.skip_b:
        return

    # (b) ------------------------------------------------------------------------------------
    t = time.perf_counter()
    sol = solve_tokens(field, y0, (0.0, args.t1), method=args.method, rtol=args.rtol, atol=args.atol)
    t_ours = time.perf_counter() - t
    E_ours = consensus_error(sol.ys[-1]).numpy()
    print(f"(b) batched {args.method}: {t_ours:.1f} s, {sol.n_steps} steps ({sol.n_rejected} rejected), "
          f"{sol.n_evals} evaluations of all {B} runs, max drift {sol.max_drift:.1e}")

    m = B if args.scipy_runs is None else min(args.scipy_runs, B)
    single = AttentionField(P, causal=True)

    def rhs(tt: float, yv: np.ndarray) -> np.ndarray:
        return single(tt, torch.from_numpy(yv).view(n, d)).numpy().ravel()

    t = time.perf_counter()
    E_ref, nfev = [], []
    for r in range(m):
        res = solve_ivp(rhs, (0.0, args.t1), y0[r].numpy().ravel(), method="RK45", rtol=args.rtol, atol=args.atol)
        yT = torch.from_numpy(res.y[:, -1].reshape(n, d))
        E_ref.append(float(consensus_error(yT / torch.linalg.vector_norm(yT, dim=-1, keepdim=True))))
        nfev.append(res.nfev)
    t_scipy = (time.perf_counter() - t) * B / m
    dE = np.abs(np.array(E_ref) - E_ours[:m]).max()
    scaled = "" if m == B else f" (timed on {m} runs, scaled ×{B / m:.1f})"
    print(f"    scipy solve_ivp RK45 one run at a time: {t_scipy:.1f} s{scaled}, "
          f"{statistics.mean(nfev):.0f} evaluations per run")
    print(f"    ratio {t_ours / t_scipy:.2f} (target <= 0.5); max |E_ours − E_scipy| at t1 = {dE:.1e} "
          f"(target <= 1e-6); E at t1 in [{E_ours.min():.4f}, {E_ours.max():.4f}]")


if __name__ == "__main__":
    main()
