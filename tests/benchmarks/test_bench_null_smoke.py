"""benchmarks/bench_null.py at its --smoke size: it runs and prints the ratio it is for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_null_smoke_prints_the_ratio() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_null.py"), "--smoke"], capture_output=True,
                         text=True, timeout=600, check=True, cwd=ROOT).stdout
    ratio = re.search(r"ratio \(statistics \+ null\) / statistics = ([0-9.]+)", out)
    assert ratio and float(ratio.group(1)) > 1.0
    assert "K = 5 draws" in out and "beyond chance" in out
