"""Every script in benchmarks/ runs at its --smoke size and prints a ratio against a baseline it ran
itself: a renamed argument or a moved function fails here, not on the next person who needs the
numbers. New scripts join automatically (the parametrization is the folder's listing). Each script
runs once, in this process (``tests/in_process.py``); what a script's smoke output must show beyond
its ratio is checked on that same output (``CHECKS``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.in_process import run_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One folder of generated checkpoints for every script (benchmarks/.cache is for real runs)."""
    return tmp_path_factory.mktemp("bench-cache")


def exact_wrong_side(out: str, folder: Path) -> None:
    """The three parts of a·z add up to the coefficient measured with hooks, and the value-bias part is
    the same for every token."""
    check = re.search(r"max relative difference ([0-9.e+-]+)", out)
    assert check and float(check.group(1)) < 1e-4, out
    assert re.search(r"\| value bias, a·b_V \| -6\.10 \|", out), out  # a·b_V does not depend on the tokens
    assert out.count("signed cos") == 1 and "both:" in out


def bench_null(out: str, folder: Path) -> None:
    """The ratio it is for, at K = 5 draws."""
    ratio = re.search(r"ratio \(statistics \+ null\) / statistics = ([0-9.]+)", out)
    assert ratio and float(ratio.group(1)) > 1.0
    assert "K = 5 draws" in out and "beyond chance" in out


def bench_chat_steering(out: str, folder: Path) -> None:
    """The peers comparison at its --smoke size (a tiny random Llama, a stub judge): every method either
    runs or says in one line why it is skipped; choices come from the selection split and are measured
    on report questions that are not selection questions."""
    record = json.loads((folder / "peers.json").read_text())
    assert (folder / "peers.png").stat().st_size > 0 and (folder / "peers.csv").read_text().count("\n") > 5
    assert not set(record["selection_questions"]) & set(record["report_questions"])
    ran = set(record["methods"])
    assert {"steer (default)", "prompt (AxBench)", "prompt (mention)", "DiffMean hook", "prompt (system)"} <= ran
    for name in ("steering-vectors", "repeng", "paper edit (last layer)"):
        assert name in ran or name in record["skipped"] or any(k.startswith(name) for k in record["skipped"]), name
    for choice in record["choices"]:
        if choice["report"] is not None:
            assert choice["selection"]["split"] == "selection" and choice["report"]["split"] == "report"
            assert choice["report"]["strength"] == choice["strength"]
    for p in record["report_points"]:
        assert len(p["answers"]) == len(record["report_questions"])
    assert "| method | choice" in out and "ratio to one forward pass" in out
    assert "seconds per concept" in out and "ratio of mean aggregates" in out


#: script -> (extra arguments after --smoke, given the run's folder; the check of its output)
CHECKS = {
    "exact_wrong_side.py": ((), exact_wrong_side),
    "bench_null.py": ((), bench_null),
    "bench_chat_steering.py": (("--quiet", "--out", "{folder}"), bench_chat_steering),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_smoke_run_prints_a_ratio(script: str, cache: Path, tmp_path: Path) -> None:
    args, check = CHECKS.get(script, ((), None))
    env = {"STEERFORMER_BENCH_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
           # for the scripts that start the CLI of this checkout in a child process
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / ".shim"), os.environ.get("PYTHONPATH", "")])}
    out = run_script(ROOT / "benchmarks" / script, ["--smoke", *(a.format(folder=tmp_path) for a in args)],
                     cwd=ROOT, env=env)
    assert re.search(r"ratio", out, re.IGNORECASE), f"{script} printed no ratio:\n{out[-2000:]}"
    if check is not None:
        check(out, tmp_path)


def test_every_benchmark_has_a_smoke_size() -> None:
    missing = [s for s in SCRIPTS if "--smoke" not in (ROOT / "benchmarks" / s).read_text()]
    assert not missing, f"benchmarks without a --smoke size: {missing}"


def test_chat_steering_refuses_an_unknown_method_in_one_line_before_loading() -> None:
    with pytest.raises(AssertionError, match="exited with 2") as refused:
        run_script(ROOT / "benchmarks" / "bench_chat_steering.py", ["--methods", "steer,nope"], cwd=ROOT)
    err = str(refused.value).split("exited with 2", 1)[1]
    assert "--methods" in err and "nope" in err
    assert "steering-vectors" in err  # the valid names
