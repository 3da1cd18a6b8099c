"""benchmarks/ratings/ at their smoke sizes (the folder's scripts are not in test_smoke.py's listing of
benchmarks/*.py): answers of a tiny random Llama for every setting, resumed without new work; blind rater
files whose shuffles cover every item once per rater and show no setting; made-up ratings turned into
the agreement and the rated tables; a missing or out-of-range rating refused in one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RATINGS = ROOT / "benchmarks" / "ratings"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
       "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / ".shim"), os.environ.get("PYTHONPATH", "")])}


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RATINGS / name), *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=ENV)


def ratings_module(name: str):
    """benchmarks/ratings/<name>.py imported for its functions, with ``sys.path`` and ``sys.modules`` left as
    they were (the script puts its folder on the path and imports a module named ``data``: left in the
    worker, that ``data`` would be every later script's)."""
    import importlib

    path, modules = sys.path[:], set(sys.modules)
    sys.path.insert(0, str(RATINGS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = path
        for n in set(sys.modules) - modules:
            if n.partition(".")[0] in ("collect", "data", "generate", "rater_files"):
                del sys.modules[n]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ratings") / "run"
    made = script("generate.py", "--smoke", "--out", str(out))
    assert made.returncode == 0, made.stderr[-3000:]
    return out


def test_generate_writes_one_answer_per_setting_concept_question_and_resumes(run: Path) -> None:
    header = json.loads((run / "run.json").read_text())
    n = len(header["settings"]) * len(header["concepts"]) * len(header["questions"])
    answers, facts = rows(run / "answers.jsonl"), rows(run / "settings.jsonl")
    assert len(answers) == n and len(facts) == n // len(header["questions"])
    assert {f["setting"] for f in facts} >= {"base", "prompt-axbench", "kl-0.3", "kl-1.0", "p95-1.8", "norm-0.28",
                                             "dir-more-kl0.5", "dir-desc-kl0.7", "split2-kl0.5"}
    budgets = {s["name"]: s["budget"] for s in header["settings"]}
    for f in facts:
        assert f["answer_kl"] >= 0 and f["probe_kl"] >= 0
        if f["family"] in ("kl", "layer", "dir-more", "dir-desc", "split2"):
            assert f["probe_kl"] <= budgets[f["setting"]] + 1e-9
            assert abs(f["kl_probe_search"] - f["probe_kl"]) < 1e-6  # the KL the budget bounds, measured again
    again = script("generate.py", "--smoke", "--out", str(run))
    assert again.returncode == 0 and "0 to go" in again.stdout
    assert len(rows(run / "answers.jsonl")) == n


def test_rater_files_are_blind_shuffled_and_cover_every_item_once_per_rater(run: Path) -> None:
    made = script("rater_files.py", "--run", str(run), "--chunk", "10")
    assert made.returncode == 0, made.stderr[-3000:]
    key = rows(run / "key.jsonl")
    assert len({k["id"] for k in key}) == len(key) == len(rows(run / "answers.jsonl"))
    orders = {}
    for r in ("A", "B", "C"):
        files = sorted((run / "raters" / r).glob(f"rater_{r}_*.jsonl"))
        assert len(files) > 1 and (run / "raters" / r / "INSTRUCTIONS.md").exists()
        seen = [x for f in files for x in rows(f)]
        assert sorted(x["id"] for x in seen) == sorted(k["id"] for k in key)  # disjoint, covering
        assert all(set(x) == {"id", "concept_description", "question", "answer"} for x in seen)
        orders[r] = [x["id"] for x in seen]
        names = {s["name"] for s in json.loads((run / "run.json").read_text())["settings"]}
        assert not any(v in names for x in seen for v in x.values())
    assert orders["A"] != orders["B"] != orders["C"]
    assert "Rating: [[score]]" in (run / "raters" / "A" / "INSTRUCTIONS.md").read_text()


def test_collect_refuses_missing_or_bad_ratings_and_tables_complete_ones(run: Path, tmp_path: Path) -> None:
    collect = ratings_module("collect")
    if not (run / "key.jsonl").exists():
        assert script("rater_files.py", "--run", str(run), "--chunk", "10").returncode == 0
    bad = tmp_path / "bad"
    collect.fake_ratings(run, bad, drop=1)
    first = next(bad.glob("ratings_B_*.jsonl"))
    lines = first.read_text().splitlines()
    row = json.loads(lines[0])
    row["fluency"] = 3
    first.write_text("\n".join([json.dumps(row)] + lines[1:]) + "\n")
    refused = script("collect.py", "--run", str(run), "--ratings", str(bad), "--out", str(tmp_path / "no"))
    assert refused.returncode == 2 and not (tmp_path / "no").exists()
    assert "rater A: id" in refused.stderr and "not rated" in refused.stderr
    assert f"rater B: {first.name}:1: id {row['id']}: fluency = 3" in refused.stderr

    good = tmp_path / "good"
    collect.fake_ratings(run, good)
    done = script("collect.py", "--run", str(run), "--ratings", str(good), "--out", str(tmp_path / "res"),
                  "--reps", "100")
    assert done.returncode == 0, done.stderr[-3000:]
    agree = json.loads((tmp_path / "res" / "agreement.json").read_text())
    assert set(agree["axes"]) == {"concept", "relevance", "fluency"} and set(agree["self"]["raters"]) == {"A", "B", "C"}
    for a in agree["axes"].values():
        assert set(a["pairs"]) == {"A-B", "A-C", "B-C"} and 0 < a["mean"]["kappa"] <= 1
    table = json.loads((tmp_path / "res" / "settings.json").read_text())["settings"]
    for name, r in table.items():
        assert r["aggregate"]["lo"] <= r["aggregate"]["mean"] <= r["aggregate"]["hi"], name
    assert table["kl-0.3"]["aggregate_minus_reference"]["mean"] == 0
    assert (tmp_path / "res" / "dose_curve.png").stat().st_size > 0
    assert "| setting | aggregate |" in done.stdout


def test_harmonic_aggregate_is_zero_when_an_axis_is_zero() -> None:
    collect = ratings_module("collect")
    assert collect.harmonic(2, 2, 0) == 0
    assert collect.harmonic(1, 2, 2) == pytest.approx(3 / (1 + 0.5 + 0.5))


def test_the_set_has_16_new_concepts_split_in_halves_and_16_questions_used_nowhere_else() -> None:
    concepts = json.loads((RATINGS / "concepts.json").read_text())
    assert len(concepts) == 16 and sum(c["half"] == "choose" for c in concepts) == 8
    assert sum(c["half"] == "report" for c in concepts) == 8 and len({c["name"] for c in concepts}) == 16
    used_before = {"ocean", "music", "coffee", "dragon", "mountain", "cats", "cat", "fire", "space", "chess", "winter",
                   "gold"}
    assert not used_before & {c["name"] for c in concepts}
    questions = json.loads((RATINGS / "questions.json").read_text())
    assert len(questions) == len(set(questions)) == 16
    elsewhere = [ROOT / "steerformer" / "prompts.py"] + [p for p in (ROOT / "benchmarks").rglob("*")
                                                         if p.is_file() and RATINGS not in p.parents
                                                         and p.suffix in (".py", ".md", ".json", ".jsonl")]
    for path in elsewhere:
        text = path.read_text(errors="replace")
        assert not [q for q in questions if q in text], path
