"""Which dense general eigen-solver is fastest on this machine (issue 14 item 1).

Times NumPy ``eig``, SciPy ``eig`` (overwrite_a, check_finite=False) and ``torch.linalg.eig`` on the
same random matrices, alternated round by round so a drift in machine load shows as a spread, per
dtype, at d = 1024 (and 2048 with ``--big``). The winner is what steerformer/eig.py uses.

Each line ends with every solver's median ÷ NumPy's (the baseline, same run).

Run: python benchmarks/bench_eig.py [--big] [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import SMOKE_HELP  # noqa: E402


def main() -> None:
    import numpy as np
    import scipy.linalg
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--big", action="store_true", help="also d = 2048")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = p.parse_args()
    print(f"load: {os.getloadavg()}, torch threads {torch.get_num_threads()}")
    solvers = {
        "numpy": lambda M: np.linalg.eig(M),
        "scipy": lambda M: scipy.linalg.eig(M, overwrite_a=True, check_finite=False),
        "torch": lambda M: torch.linalg.eig(torch.from_numpy(M)),
    }
    rng = np.random.default_rng(0)
    for d in ([64] if a.smoke else [1024, 2048] if a.big else [1024]):
        for dt in (np.float64, np.float32):
            M = rng.standard_normal((d, d)).astype(dt)
            times: dict[str, list[float]] = {k: [] for k in solvers}
            solvers["numpy"](M.copy())  # warm-up
            for _ in range(a.rounds):
                for name, f in solvers.items():
                    X = M.copy()
                    t = time.perf_counter()
                    f(X)
                    times[name].append(time.perf_counter() - t)
            line = ", ".join(f"{k} {statistics.median(v):.2f} s (min {min(v):.2f})" for k, v in times.items())
            base = statistics.median(times["numpy"])
            ratios = ", ".join(f"{k} {statistics.median(v) / base:.2f}" for k, v in times.items() if k != "numpy")
            print(f"d={d} {np.dtype(dt).name}: {line}; ratio to numpy: {ratios}")


if __name__ == "__main__":
    main()
