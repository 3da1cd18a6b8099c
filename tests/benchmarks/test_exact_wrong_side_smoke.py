"""benchmarks/exact_wrong_side.py at its --smoke size: the three parts of a·z add up to the
coefficient measured with hooks, and the value-bias part is the same for every token."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_exact_wrong_side_smoke_parts_add_up_to_the_measured_coefficient() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "exact_wrong_side.py"), "--smoke"],
                         capture_output=True, text=True, timeout=900, check=True, cwd=ROOT).stdout
    check = re.search(r"max relative difference ([0-9.e+-]+)", out)
    assert check and float(check.group(1)) < 1e-4, out
    assert re.search(r"\| value bias, a·b_V \| -6\.10 \|", out), out  # a·b_V does not depend on the tokens
    assert out.count("signed cos") == 1 and "both:" in out
