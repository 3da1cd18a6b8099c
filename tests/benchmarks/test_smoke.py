"""Every script in benchmarks/ runs at its --smoke size and prints a ratio against a baseline it ran
itself: a renamed argument or a moved function fails here, not on the next person who needs the
numbers. New scripts join automatically (the parametrization is the folder's listing)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One folder of generated checkpoints for every script (benchmarks/.cache is for real runs)."""
    return tmp_path_factory.mktemp("bench-cache")


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_smoke_run_prints_a_ratio(script: str, cache: Path) -> None:
    env = {**os.environ, "STEERFORMER_BENCH_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / ".shim"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, env=env)
    assert run.returncode == 0, f"{script} --smoke failed:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    assert re.search(r"ratio", run.stdout, re.IGNORECASE), f"{script} printed no ratio:\n{run.stdout[-2000:]}"


def test_every_benchmark_has_a_smoke_size() -> None:
    missing = [s for s in SCRIPTS if "--smoke" not in (ROOT / "benchmarks" / s).read_text()]
    assert not missing, f"benchmarks without a --smoke size: {missing}"
