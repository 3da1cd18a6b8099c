"""Blind rater files from a run's answers (PROTOCOL.md beside this file): every answer becomes an item
with an opaque id; each rater gets every item, in a shuffle of its own (seeded), split into numbered
reading sessions of about --chunk items; the key (id -> setting, concept, question) is written apart.

Writes into --run (the folder generate.py wrote):
    raters/<R>/rater_<R>_NN.jsonl   {"id", "concept_description", "question", "answer"}: nothing else
    raters/<R>/INSTRUCTIONS.md      the rubrics and the file format (INSTRUCTIONS.md, for rater R)
    key.jsonl                       {"id", "setting", "concept", "question_index", "question", "files"}
Give rater R the folder raters/R/ only; its ratings come back as ratings_<R>_NN.jsonl (collect.py).

Run:  python benchmarks/ratings/rater_files.py --run benchmarks/ratings/choose
      python benchmarks/ratings/rater_files.py --smoke          (a smoke run of generate.py first, seconds)
"""

from __future__ import annotations

import argparse
import math
import random
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import data  # noqa: E402

RATERS = ("A", "B", "C")
ITEM_FIELDS = ("id", "concept_description", "question", "answer")


def items_of(run: Path, *, allow_partial: bool = False, settings: list[str] | None = None) -> list[dict]:
    """The run's answers in a fixed order (settings as run.json lists them, concepts, questions); refused
    when a (setting, concept, question) of run.json has no answer, unless ``allow_partial``. The folder is
    read and checked by ``data.read_run``. ``settings``: only these (the report half rates the chosen rule
    beside the baselines, not every candidate)."""
    made = data.read_run(run, key=False)
    header, answers = made.header, list(made.answers)
    order = {s["name"]: i for i, s in enumerate(header["settings"])}
    if settings is not None:
        unknown = sorted(set(settings) - set(order))
        if unknown:
            raise data.RunError(f"--settings: {unknown} are not settings of {run} ({', '.join(order)})")
        order = {s: i for s, i in order.items() if s in settings}
        answers = [a for a in answers if a["setting"] in order]
    descriptions = {c["name"]: c["description"] for c in header["concepts"]}
    seen = {(a["setting"], a["concept"], a["question_index"]) for a in answers}
    expected = {(s, c, q) for s in order for c in descriptions for q in range(len(header["questions"]))}
    missing = sorted(expected - seen)
    if missing and not allow_partial:
        raise data.RunError(f"{run}: {len(missing)} of {len(expected)} answers are not made yet (first: {missing[0]}); "
                            "finish generate.py, or pass --allow-partial")
    answers.sort(key=lambda a: (order.get(a["setting"], len(order)), a["concept"], a["question_index"]))
    return [{**a, "description": descriptions[a["concept"]]} for a in answers]


def written_here(path: Path, rater: str) -> bool:
    """Whether ``path`` (in raters/``rater``/) is a file this script wrote, judged by its name and its
    content: ``INSTRUCTIONS.md``, or a ``rater_<R>_NN.jsonl`` whose every line is an item with exactly the
    fields a rater is shown. A file the rater filled in (ratings added to the items), or any other file,
    is not: it is never removed."""
    if path.is_symlink() or not path.is_file():
        return False
    if path.name == "INSTRUCTIONS.md":
        return True
    if re.fullmatch(rf"rater_{rater}_\d+\.jsonl", path.name) is None:
        return False
    try:
        return all(not isinstance(row, str) and set(row) == set(ITEM_FIELDS)
                   for _, row in data.jsonl_lines(path, inside=path.parent))
    except data.RunError:
        return False


def returned_ratings(run: Path) -> list[Path]:
    """The raters' returned files in <run>/ratings/ (what collect.py reads)."""
    folder = run / "ratings"
    return sorted(folder.glob("ratings_*.jsonl")) if folder.is_dir() else []


def assign_ids(n: int, seed: int) -> list[str]:
    """n distinct opaque ids (8 hex digits), drawn from a seeded generator."""
    rng = random.Random(f"ids-{seed}")
    ids: list[str] = []
    taken: set[str] = set()
    while len(ids) < n:
        i = f"{rng.getrandbits(32):08x}"
        if i not in taken:
            taken.add(i)
            ids.append(i)
    return ids


def chunks(seq: list, size: int) -> list[list]:
    """``seq`` in ceil(len/size) consecutive parts of near-equal length (disjoint, covering it)."""
    k = max(1, math.ceil(len(seq) / size))
    return [seq[i * len(seq) // k:(i + 1) * len(seq) // k] for i in range(k)]


def make(run: Path, raters: list[str], *, chunk: int = 400, seed: int = 0, allow_partial: bool = False,
         force: bool = False, settings: list[str] | None = None) -> dict:
    items = items_of(run, allow_partial=allow_partial, settings=settings)
    ids = assign_ids(len(items), seed)
    key_path, folder = run / "key.jsonl", run / "raters"
    key = [{"id": i, "setting": a["setting"], "concept": a["concept"], "question_index": a["question_index"],
            "question": a["question"], "files": {}} for i, a in zip(ids, items)]
    if key_path.exists() or key_path.is_symlink():
        old = [(k.get("id"), k.get("setting"), k.get("concept"), k.get("question_index"))
               for k in data.read_jsonl(key_path)]
        if old != [(k["id"], k["setting"], k["concept"], k["question_index"]) for k in key]:
            returned = returned_ratings(run)
            if returned:  # --force or not: the key those ratings were made against is theirs
                raise data.RunError(f"{key_path} is the key of the ratings returned in {returned[0].parent} "
                                    f"({len(returned)} files, e.g. {returned[0].name}); new ids would leave them "
                                    "matching nothing. Keep this key (the same --seed and answers), or move the "
                                    "ratings and the key elsewhere first")
            if not force:
                raise data.RunError(f"{key_path} exists for other items (ratings made against it would no longer "
                                    "match); pass --force to make new ids")
    text = (HERE / "INSTRUCTIONS.md").read_text()
    by_id = {k["id"]: k for k in key}
    shown = {i: {"id": i, "concept_description": a["description"], "question": a["question"], "answer": a["answer"]}
             for i, a in zip(ids, items)}
    if folder.exists() or folder.is_symlink():  # only what this script wrote is replaced: never a returned rating
        if folder.is_symlink() or not folder.is_dir():
            raise data.RunError(f"{folder} is not a folder (a link or a file); move it before making the rater files")
        other = [p for p in sorted(folder.rglob("*")) if not (p.is_dir() and not p.is_symlink() and p.parent == folder)
                 and not (p.parent.parent == folder and written_here(p, p.parent.name))]
        if other:
            raise data.RunError(f"{folder} holds a file this script did not write ({other[0]}: returned ratings, or a "
                                "rater's notes); move it (returned ratings belong in <run>/ratings/) before making the "
                                "rater files again")
        shutil.rmtree(folder)
    layout = {}
    for r in raters:
        order = list(ids)
        random.Random(f"rater-{r}-{seed}").shuffle(order)
        parts = chunks(order, chunk)
        names = []
        for n, part in enumerate(parts, 1):
            name = f"rater_{r}_{n:02d}.jsonl"
            data.write_jsonl(folder / r / name, [shown[i] for i in part])
            for i in part:
                by_id[i]["files"][r] = name
            names.append((name, len(part)))
        data.write_text(folder / r / "INSTRUCTIONS.md", text.format(rater=r))
        layout[r] = names
    data.write_jsonl(key_path, key)
    return {"items": len(items), "raters": layout}


@data.one_line_errors
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=None, help="the run folder (default benchmarks/ratings/choose)")
    ap.add_argument("--raters", default=",".join(RATERS), help="rater letters (default A,B,C)")
    ap.add_argument("--chunk", type=int, default=400, help="items per reading session, about (default 400)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--allow-partial", action="store_true", help="make files although some answers are missing")
    ap.add_argument("--force", action="store_true", help="replace a key.jsonl made for other items")
    ap.add_argument("--settings", default=None, help="comma-separated settings to rate (default: every one of the run)")
    ap.add_argument("--smoke", action="store_true", help="a smoke run of generate.py into a temporary folder first")
    args = ap.parse_args(argv)
    raters = [r.strip() for r in args.raters.split(",") if r.strip()]
    if not raters or len(set(raters)) != len(raters) or not all(r.isalnum() for r in raters):
        raise data.RunError(f"--raters {args.raters!r}: distinct letters or names (letters and digits)")
    if args.chunk < 1:
        raise data.RunError(f"--chunk {args.chunk}: at least 1 item per file")
    if args.smoke and args.run is None:
        import generate

        args.run = tempfile.mkdtemp(prefix="ratings-smoke-")
        generate.main(["--smoke", "--out", args.run])
        args.chunk = min(args.chunk, 25)
    run = Path(args.run) if args.run else data.default_run("choose")
    settings = [s.strip() for s in args.settings.split(",") if s.strip()] if args.settings else None
    made = make(run, raters, chunk=args.chunk, seed=args.seed, allow_partial=args.allow_partial, force=args.force,
                settings=settings)
    print(f"{made['items']} items -> {run / 'raters'} (key: {run / 'key.jsonl'})")
    for r, parts in made["raters"].items():
        print(f"  rater {r}: " + ", ".join(f"{name} ({n})" for name, n in parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
