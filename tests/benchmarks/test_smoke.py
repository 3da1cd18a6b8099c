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


def test_chat_steering_smoke_writes_the_peer_table_its_files_and_keeps_the_report_split_apart(tmp_path) -> None:
    """The peers comparison (issue 27 item 4) at its --smoke size: a tiny random Llama, a stub judge;
    every method either runs or says in one line why it is skipped; choices come from the selection
    split and are measured on report questions that are not selection questions."""
    import json

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_chat_steering.py"), "--smoke", "--quiet",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "peers.json").read_text())
    assert (tmp_path / "peers.png").stat().st_size > 0 and (tmp_path / "peers.csv").read_text().count("\n") > 5
    assert not set(record["selection_questions"]) & set(record["report_questions"])
    ran = set(record["methods"])
    assert {"steer --choose judged (judged gain)", "steer (default: the KL rule)", "prompt (AxBench)", "prompt (mention)",
            "DiffMean hook", "prompt (system)"} <= ran
    for name in ("distilled", "steering-vectors", "repeng", "paper edit (last layer)"):
        assert name in ran or name in record["skipped"] or any(k.startswith(name) for k in record["skipped"]), name
    for choice in record["choices"]:
        if choice["report"] is not None:
            assert choice["selection"]["split"] == "selection" and choice["report"]["split"] == "report"
            assert choice["report"]["strength"] == choice["strength"]
    for p in record["report_points"]:
        assert len(p["answers"]) == len(record["report_questions"])
    assert "| method | choice" in run.stdout and "ratio to one forward pass" in run.stdout
    assert "seconds per concept" in run.stdout and "ratio of mean aggregates" in run.stdout


def test_chat_steering_refuses_an_unknown_method_in_one_line_before_loading() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_chat_steering.py"), "--methods",
                          "steer,nope"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 2 and "--methods" in run.stderr and "nope" in run.stderr
    assert "steering-vectors" in run.stderr  # the valid names
