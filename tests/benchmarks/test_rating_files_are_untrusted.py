"""The rating tools (benchmarks/ratings/) read files other people wrote — the raters' returned ratings —
and a run folder that may have been edited, moved or half made. Whatever is wrong with them is one line
naming the file and the line (exit 2), never a traceback, a hang or a table computed from the wrong
items; and making the rater files again never removes a returned rating nor the key it was made against.
A run folder of 2 settings x 2 concepts x 2 questions is written by hand here (no model), its rater
files by rater_files.py; the scripts run in this process (``tests/in_process.py``), except where a hang
is the point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.in_process import run_script_result

ROOT = Path(__file__).resolve().parents[2]
RATINGS = ROOT / "benchmarks" / "ratings"
RATERS = ("A", "B", "C")
SETTINGS = [{"name": "base", "family": "base"}, {"name": "kl-0.3", "family": "kl"}]
CONCEPTS = [{"name": "bread", "description": "references to bread", "half": "choose"},
            {"name": "rain", "description": "references to rain", "half": "choose"}]
QUESTIONS = ["How do I fix a flat tyre?", "What makes a good book?"]


def write_jsonl(path: Path, rows: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def script(name: str, *args) -> subprocess.CompletedProcess:
    return run_script_result(RATINGS / name, [str(a) for a in args])


def one_error_line(res: subprocess.CompletedProcess, *words: str) -> str:
    """The refusal: exit 2, no traceback, one ``error:`` line on stderr holding ``words``."""
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run folder with its rater files, key and a complete set of returned ratings."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"model": "by hand", "half": "choose", "questions": QUESTIONS,
                                              "tokens": 6, "concepts": CONCEPTS, "settings": SETTINGS}))
    answers, facts = [], []
    for s in SETTINGS:
        for c in CONCEPTS:
            for i, q in enumerate(QUESTIONS):
                answers.append({"setting": s["name"], "concept": c["name"], "question_index": i, "question": q,
                                "answer": f"{s['name']} about {c['name']}, {i}", "n_tokens": 4, "answer_kl": 0.1 * i})
            facts.append({"setting": s["name"], "concept": c["name"], "probe_kl": 0.1, "answer_kl": 0.1, "layers": [1]})
    write_jsonl(run / "answers.jsonl", answers)
    write_jsonl(run / "settings.jsonl", facts)
    made = script("rater_files.py", "--run", run, "--chunk", 4)
    assert made.returncode == 0, made.stderr
    (run / "ratings").mkdir()
    for n, r in enumerate(RATERS):
        write_jsonl(run / "ratings" / f"ratings_{r}_01.jsonl",
                    [{"id": k["id"], "concept": (i + n) % 3, "relevance": i % 3, "fluency": 2}
                     for i, k in enumerate(rows(run / "key.jsonl"))])
    return run


def collect(run: Path, *args) -> subprocess.CompletedProcess:
    return script("collect.py", "--run", run, "--reps", 20, "--out", run.parent / "results", *args)


def first_ratings(run: Path) -> Path:
    return run / "ratings" / "ratings_A_01.jsonl"


def replace_first_line(run: Path, line: bytes) -> None:
    path = first_ratings(run)
    rest = path.read_bytes().split(b"\n", 1)[1]
    path.write_bytes(line + b"\n" + rest)


def problems(res: subprocess.CompletedProcess, *words: str) -> str:
    """A refused collect: exit 2, no traceback, a problem line holding ``words``, nothing computed."""
    assert res.returncode == 2, (res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "nothing computed" in res.stderr.splitlines()[-1]
    hit = [ln for ln in res.stderr.splitlines() if all(w in ln for w in words)]
    assert hit, res.stderr
    return hit[0]


def test_complete_ratings_are_tabled(run: Path) -> None:
    done = collect(run)
    assert done.returncode == 0, done.stderr
    assert set(json.loads((run.parent / "results" / "settings.json").read_text())["settings"]) == {"base", "kl-0.3"}


@pytest.mark.parametrize("line, words", [
    (b"[" * 100_000, ("nested more than 64 levels",)),  # RecursionError before
    (b'{"id": "x", "concept": 2}\xff\xfe', ("not UTF-8 text", "0xff")),  # UnicodeDecodeError before
    (None, ("gives the key 'fluency' twice",)),  # {"fluency": 0, ..., "fluency": 2}: the last one counted in silence
    (b'{"id": "' + b"x" * (1 << 20) + b'"}', ("more than the 1048576",)),  # read and held whole before
    (b"concept 2, relevance 1", ("not valid JSON",)),
    (b'["an", "array"]', ("not a JSON object",)),
], ids=["nested-100000-deep", "not-utf8", "key-given-twice", "line-over-1-MiB", "not-json", "not-an-object"])
def test_a_returned_line_that_is_not_one_json_object_is_a_problem_naming_the_file_and_line(run, line, words) -> None:
    if line is None:
        row = rows(first_ratings(run))[0]
        line = json.dumps({**row, "fluency": 0})[:-1].encode() + b', "fluency": 2}'
    replace_first_line(run, line)
    problems(collect(run), "rater A: ratings_A_01.jsonl:1:", *words)
    assert not (run.parent / "results").exists()


@pytest.mark.parametrize("value", [3, -1, 1.5, "2", None, True, float("nan")],
                         ids=["3", "-1", "1.5", "string-2", "null", "bool", "nan"])
def test_a_rating_that_is_not_0_1_or_2_is_refused_naming_file_line_and_id(run, value) -> None:
    row = rows(first_ratings(run))[0]
    replace_first_line(run, json.dumps({**row, "relevance": value}).encode())
    problems(collect(run), f"rater A: ratings_A_01.jsonl:1: id {row['id']}: relevance = ", "integer 0, 1 or 2")


@pytest.mark.parametrize("change, words", [
    ("drop", ("not rated", "raters/A/")),
    ("repeat", ("rated twice (first in ratings_A_01.jsonl:1)",)),
    ("other-run", ("id 'deadbeef' is no item of key.jsonl",)),
    ("int-id", ("expected the item's id, a string",)),
], ids=["missing-id", "duplicate-id", "id-of-another-run", "id-not-a-string"])
def test_a_missing_repeated_or_foreign_id_is_refused(run, change, words) -> None:
    path = first_ratings(run)
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    if change == "drop":
        lines = lines[1:]
    elif change == "repeat":
        lines.append(lines[0])
    elif change == "other-run":
        lines[0] = json.dumps({**row, "id": "deadbeef"})
    else:
        lines[0] = json.dumps({**row, "id": 12345678})
    path.write_text("\n".join(lines) + "\n")
    problems(collect(run), "rater A:", *words)


def test_a_ratings_file_that_links_out_of_its_folder_is_refused(run, tmp_path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    first_ratings(run).rename(outside)
    first_ratings(run).symlink_to(outside)
    problems(collect(run), "rater A:", "ratings_A_01.jsonl is a link to", "outside")


def test_a_ratings_file_over_the_size_limit_is_refused_unread(run) -> None:
    with first_ratings(run).open("r+b") as f:
        f.truncate((64 << 20) + 1)  # sparse: nothing to read, were it read
    problems(collect(run), "rater A:", "more than the 67108864 bytes")


def test_a_ratings_file_that_is_a_fifo_is_named_never_waited_on(run) -> None:
    first_ratings(run).unlink()
    os.mkfifo(first_ratings(run))
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(RATINGS / "collect.py"), "--run", str(run), "--reps", "20"],
                         capture_output=True, text=True, timeout=120, env=env)  # a hang fails here
    problems(res, "rater A:", "ratings_A_01.jsonl is a FIFO")


@pytest.mark.parametrize("how", ["empty", "missing"])
def test_an_empty_or_missing_ratings_folder_says_so(run, how) -> None:
    for p in (run / "ratings").iterdir():
        p.unlink()
    if how == "missing":
        (run / "ratings").rmdir()
        problems(collect(run), "--ratings", "no such folder")
    else:
        assert all(problems(collect(run), f"rater {r}: no ratings_{r}*.jsonl") for r in RATERS)


@pytest.mark.parametrize("damage, words", [
    ("not-a-folder", ("not a run folder",)),
    ("no-run-json", ("not a run folder (it has no run.json",)),
    ("no-key", ("no key.jsonl yet", "rater_files.py --run")),
    ("key-item-without-answer", ("key.jsonl:1: field (setting, concept, question_index)", "an answer of answers.jsonl")),
    ("key-question-changed", ("key.jsonl:1: field question:", "run.json's question 0")),
    ("key-setting-not-in-run", ("key.jsonl:1: field setting: 'kl-9'", "a setting of run.json")),
    ("key-id-twice", ("key.jsonl:9: field id:", "line 1 has it too")),
    ("key-line-without-id", ("key.jsonl:1: field id: None",)),
    ("answers-question-index-7", ("answers.jsonl:1: field question_index: 7", "an integer 0-1")),
    ("answers-kl-nan", ("answers.jsonl:1: field answer_kl: nan",)),
    ("run-json-a-list", ("run.json: field (top level)",)),
    ("concept-name-with-a-pipe", ("run.json: field concepts.0.name: 'bre|ad'", "'|'")),
], ids=lambda x: x if isinstance(x, str) else "")
def test_a_run_folder_that_contradicts_itself_is_one_line_naming_file_and_line(run, damage, words) -> None:
    key = rows(run / "key.jsonl")
    answers = rows(run / "answers.jsonl")
    header = json.loads((run / "run.json").read_text())
    target = run
    if damage == "not-a-folder":
        target = run / "run.json"
    elif damage == "no-run-json":
        (run / "run.json").unlink()
    elif damage == "no-key":
        (run / "key.jsonl").unlink()
    elif damage == "key-item-without-answer":
        write_jsonl(run / "answers.jsonl", [a for a in answers if (a["setting"], a["concept"], a["question_index"])
                                            != (key[0]["setting"], key[0]["concept"], key[0]["question_index"])])
    elif damage == "key-question-changed":
        write_jsonl(run / "key.jsonl", [{**key[0], "question": "Something else?"}] + key[1:])
    elif damage == "key-setting-not-in-run":
        write_jsonl(run / "key.jsonl", [{**key[0], "setting": "kl-9"}] + key[1:])
    elif damage == "key-id-twice":
        write_jsonl(run / "key.jsonl", key + [key[0]])
    elif damage == "key-line-without-id":
        write_jsonl(run / "key.jsonl", [{k: v for k, v in key[0].items() if k != "id"}] + key[1:])
    elif damage == "answers-question-index-7":
        write_jsonl(run / "answers.jsonl", [{**answers[0], "question_index": 7}] + answers[1:])
    elif damage == "answers-kl-nan":
        write_jsonl(run / "answers.jsonl", [{**answers[0], "answer_kl": float("nan")}] + answers[1:])
    elif damage == "run-json-a-list":
        (run / "run.json").write_text("[]")
    else:
        header["concepts"][0]["name"] = "bre|ad"
        (run / "run.json").write_text(json.dumps(header))
        for name in ("answers.jsonl", "settings.jsonl", "key.jsonl"):
            write_jsonl(run / name, [{**r, "concept": "bre|ad"} if r["concept"] == "bread" else r
                                     for r in rows(run / name)])
    one_error_line(script("collect.py", "--run", target, "--reps", 20, "--out", run.parent / "results"), *words)
    assert not (run.parent / "results").exists()


@pytest.mark.parametrize("flags, words", [
    (("--raters", "A,A"), ("--raters 'A,A'", "two distinct raters")),  # a table of one rater before
    (("--raters", "A"), ("--raters 'A'",)),
    (("--raters", "A,B/C"), ("letters and digits",)),
    (("--reps", "0"), ("--reps 0", "at least 1")),  # numpy's reshape error before
], ids=["rater-twice", "one-rater", "rater-not-a-name", "no-resamples"])
def test_flags_that_would_make_a_wrong_table_are_refused(run, flags, words) -> None:
    res = script("collect.py", "--run", run, "--out", run.parent / "results", *(["--reps", "20"] if "--reps" not in
                                                                                 flags else []), *flags)
    one_error_line(res, *words)
    assert not (run.parent / "results").exists()


def test_answers_made_after_the_rater_files_are_counted_out_loud(run) -> None:
    extra = {**rows(run / "answers.jsonl")[0], "setting": "kl-0.3", "concept": "rain", "question_index": 1}
    lines = [a for a in rows(run / "answers.jsonl") if (a["setting"], a["concept"], a["question_index"])
             != ("kl-0.3", "rain", 1)]
    key = rows(run / "key.jsonl")
    dropped = [k for k in key if (k["setting"], k["concept"], k["question_index"]) == ("kl-0.3", "rain", 1)][0]
    write_jsonl(run / "key.jsonl", [k for k in key if k is not dropped])
    for r in RATERS:
        p = run / "ratings" / f"ratings_{r}_01.jsonl"
        write_jsonl(p, [x for x in rows(p) if x["id"] != dropped["id"]])
    write_jsonl(run / "answers.jsonl", lines + [{**extra, "question": QUESTIONS[1]}])
    res = collect(run)
    assert res.returncode == 0, res.stderr
    assert "note: 1 answers of" in res.stderr and "the tables leave them out" in res.stderr


def test_making_the_rater_files_again_never_removes_a_file_a_rater_filled_in(run) -> None:
    given = sorted((run / "raters" / "A").glob("rater_A_*.jsonl"))[0]
    filled = [{**item, "concept": 2, "relevance": 1, "fluency": 2} for item in rows(given)]
    write_jsonl(given, filled)  # the rater wrote the ratings into the file it was given, under its name
    again = script("rater_files.py", "--run", run, "--chunk", 4)
    one_error_line(again, f"holds a file this script did not write ({given}")
    assert rows(given) == filled


def test_new_ids_are_refused_while_returned_ratings_hold_the_old_ones(run) -> None:
    key = (run / "key.jsonl").read_bytes()
    for extra in ([], ["--force"]):
        again = script("rater_files.py", "--run", run, "--chunk", 4, "--seed", 1, *extra)
        one_error_line(again, "is the key of the ratings returned in", "ratings_A_01.jsonl")
        assert (run / "key.jsonl").read_bytes() == key  # the key the ratings were made against
    assert script("rater_files.py", "--run", run, "--chunk", 4).returncode == 0  # same seed: the same key
    assert (run / "key.jsonl").read_bytes() == key


def load_data_module():
    """benchmarks/ratings/data.py as a private module (no sys.path or sys.modules entry of its own)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ratings_data_under_test", RATINGS / "data.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.mark.parametrize("name", ["salt, pepper", " bread", "bre|ad", "tab\there", ""],
                         ids=["comma", "leading-space", "pipe", "tab", "empty"])
def test_a_concept_name_a_flag_or_a_table_cannot_hold_is_refused_when_the_concepts_are_read(tmp_path, name) -> None:
    data = load_data_module()
    path = tmp_path / "concepts.json"
    path.write_text(json.dumps([{"name": name, "description": "references to it", "half": "choose"}]))
    with pytest.raises(data.RunError) as info:
        data.load_concepts("choose", path)
    assert f"{path}: field 0.name" in info.value.message
    assert [c.name for c in data.load_concepts()] == sorted(c["name"] for c in json.loads(
        (RATINGS / "concepts.json").read_text()))  # the set's own names pass
