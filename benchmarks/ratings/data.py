"""The rating set's data (PROTOCOL.md beside this file): the concepts and their split, the questions,
the named settings whose answers are rated, and the JSON-lines files every step reads and writes.

Torch-free: ``rater_files.py`` and ``collect.py`` need nothing but this module and the standard
library (``collect.py`` imports the package's Cohen's κ, which is pure Python too).

Every file these scripts read — the run folder's own and, above all, the raters' returned ones, written
by other people — goes through one guarded reader (:func:`jsonl_lines`, :func:`read_json`) and the run
folder through one check (:func:`read_run`): whatever is wrong is a :class:`RunError`, one line naming
the file and the line, which each script's ``main`` prints as ``error: ...`` with exit status 2."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from steerformer.prompts import CARRIERS, OTHER_NOUNS  # import-light: no torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HALVES = ("choose", "report")
AXES = ("concept", "relevance", "fluency")

#: the prompting baseline as this project has always worded it (benchmarks/data/judge_labels/PROTOCOL.md,
#: bench_chat_steering.py) — here with the concept's AxBench-style description
AXBENCH_PROMPT = ("{question} You must include content related to {description} in your answer, while still "
                  "answering the question.")
#: AxBench's own fixed steering prompt, verbatim (stanfordnlp/axbench, axbench/utils/dataset.py, T_PROMPT_STEERING),
#: appended to the question as above
AXBENCH_REPO_PROMPT = ("{question} You must answer the question with content related to {description} even if it "
                       "is not related to the question or it does not make sense.")

#: words of a description that carry no concept (dropped when the description's words make a direction)
STOP_WORDS = frozenset("references expressions of to and or the a an its their such as with them parts".split())

#: (a) "more carriers and contrast nouns": the templated contrast over steerformer.prompts' 24 carriers and 48 nouns.
#: When the choosing half was generated the package read 8 carriers and 16 nouns (the "kl-*", "layer*", "p95-*",
#: "norm-*" and "split2-*" settings there use those); the extra 16 and 32 (each carrier ends right before the word;
#: no noun names or neighbours a concept of concepts.json) made (a), which won and became the package's own.
FIRST_CARRIERS, FIRST_NOUNS = 8, 16
EXTRA_CARRIERS, EXTRA_NOUNS = CARRIERS[FIRST_CARRIERS:], OTHER_NOUNS[FIRST_NOUNS:]


@dataclasses.dataclass(frozen=True)
class Concept:
    name: str  # the word or phrase steer takes as token=
    description: str  # AxBench-style: what the raters read
    half: str  # "choose" or "report"

    @property
    def words(self) -> list[str]:
        """The description's content words, in order, once each (STOP_WORDS dropped)."""
        return content_words(self.description)


def content_words(description: str) -> list[str]:
    out: list[str] = []
    for w in re.findall(r"[A-Za-z][A-Za-z'-]*", description.lower()):
        if w not in STOP_WORDS and w not in out:
            out.append(w)
    return out


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a concept or a setting, or None: it must be a non-empty string of printable
    characters without surrounding spaces, a comma (``--concepts a,b`` and ``--settings`` split on it) or a
    ``|`` (a cell of the markdown tables)."""
    if not isinstance(name, str) or not name:
        return "a non-empty string"
    if name != name.strip() or not name.isprintable() or "," in name or "|" in name:
        return "printable characters without surrounding spaces, ',' or '|' (a comma-separated flag and a table cell hold it)"
    return None


def load_concepts(half: str | None = None, path: Path = HERE / "concepts.json") -> list[Concept]:
    """The concepts (of ``half``), sorted by name; the file's shape is checked."""
    raw = read_json(Path(path))
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise RunError(f"{path}: a JSON list of objects {{name, description, half}}")
    for n, c in enumerate(raw):
        for k in ("name", "description", "half"):
            if not isinstance(c.get(k), str):
                raise RunError(f"{path}: field {n}.{k}: {c.get(k)!r:.60} is no string")
        why = name_problem(c["name"])
        if why:
            raise RunError(f"{path}: field {n}.name: {c['name']!r:.60} is no concept name (expected {why})")
    concepts = [Concept(**{k: c[k] for k in ("name", "description", "half")}) for c in raw]
    names = [c.name for c in concepts]
    bad = [c.name for c in concepts if c.half not in HALVES or not c.description.strip()]
    if bad or len(set(names)) != len(names):
        raise RunError(f"{path}: every concept needs a unique name, a description and a half in {HALVES} "
                       f"(bad: {bad or sorted({n for n in names if names.count(n) > 1})})")
    if half is not None:
        if half not in HALVES:
            raise RunError(f"--half {half!r}: one of {', '.join(HALVES)}")
        concepts = [c for c in concepts if c.half == half]
    return sorted(concepts, key=lambda c: c.name)


def load_questions(path: Path = HERE / "questions.json") -> list[str]:
    """The questions, in the file's order (their index is the question's number in every file)."""
    raw = read_json(Path(path))
    if not isinstance(raw, list) or not all(isinstance(q, str) for q in raw):
        raise RunError(f"{path}: a JSON list of question strings")
    qs = list(raw)
    if len(set(qs)) != len(qs) or not qs:
        raise RunError(f"{path}: a non-empty list of distinct questions")
    return qs


# ---- the settings ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Setting:
    """One named way of answering (its answers are rated); ``code``: the exact code path, for the protocol."""

    name: str
    family: str  # base | prompt | kl | layer | p95 | norm | dir-more | dir-desc | split2
    code: str
    budget: float | None = None  # mean probe KL budget (kl, layer, dir-*, split2), p95 level (p95)
    layer: int | None = None  # fixed layer (layer)
    alpha: float | None = None  # gain / residual norm (norm)


KL_BUDGETS = (0.3, 0.5, 0.7, 1.0)
LAYER_BUDGET = 0.5
P95_LEVELS = (1.8, 2.5)  # bread's probe p95 at mean-KL 0.5 and 0.7 (PROTOCOL.md)
NORM_ALPHA = 0.28  # bread at its layer 19: mean probe KL about 0.6 (PROTOCOL.md)
DIRECTION_BUDGETS = (0.5, 0.7)
SMOLLM2_LAYERS = (12, 16, 19, 22)


def all_settings(fixed_layers: Sequence[int] = SMOLLM2_LAYERS) -> list[Setting]:
    """Every setting, in generation order (names are stable: the rated tables are keyed by them)."""
    s = [Setting("base", "base", "Baseline.of(model, tok, questions, max_new_tokens=40): the unsteered greedy answers"),
         Setting("prompt-axbench", "prompt", "user turn AXBENCH_PROMPT.format(question, description), base model"),
         Setting("prompt-axbench-repo", "prompt", "user turn AXBENCH_REPO_PROMPT.format(question, description), "
                                                  "base model")]
    s += [Setting(f"kl-{b:.1f}", "kl", f"kl_curve(model, {list(KL_BUDGETS)}, token=name)['points'][{i}]['edits'] "
                  f"(= sf.steer(model, token=name, max_kl={b:.1f}, layers=[the layer sf.steer(model, token=name) "
                  "chooses]); kl-0.3 is today's default", budget=b) for i, b in enumerate(KL_BUDGETS)]
    s += [Setting(f"layer{k}-kl{LAYER_BUDGET:g}", "layer", f"kl_curve(model, [{LAYER_BUDGET:g}], token=name, "
                  f"layers=[{k}], max_kl={LAYER_BUDGET:g}) (= sf.steer(model, token=name, layers=[{k}], "
                  f"max_kl={LAYER_BUDGET:g}))", budget=LAYER_BUDGET, layer=k) for k in fixed_layers]
    s += [Setting(f"p95-{p:g}", "p95", "the kl-0.5 edits scaled (Edit.scaled) to the largest gain whose 95th "
                  f"percentile of per-token KL(base || steered) on the probe is <= {p:g} nats", budget=p)
          for p in P95_LEVELS]
    s += [Setting(f"norm-{NORM_ALPHA:g}", "norm", f"the kl-0.5 edits scaled (Edit.scaled) to gain {NORM_ALPHA:g} x "
                  "the median residual norm after the scan's layer", alpha=NORM_ALPHA)]
    for b in DIRECTION_BUDGETS:
        s.append(Setting(f"dir-more-kl{b:g}", "dir-more", "kl_curve(model, [0.5, 0.7], direction=Direction({layer: u}), "
                         "layers=[the scan's layer]) with u the templated contrast over CARRIERS + EXTRA_CARRIERS and "
                         "OTHER_NOUNS + EXTRA_NOUNS (hidden_states of the model's own forward)", budget=b))
    for b in DIRECTION_BUDGETS:
        s.append(Setting(f"dir-desc-kl{b:g}", "dir-desc", "kl_curve(model, [0.5, 0.7], direction=Direction({layer: u}), "
                         "layers=[the scan's layer]) with u the normalized mean of the unit templated contrasts of the "
                         "description's content words (CARRIERS, OTHER_NOUNS)", budget=b))
    for b in DIRECTION_BUDGETS:
        s.append(Setting(f"split2-kl{b:g}", "split2", "kl_curve(model, [0.5, 0.7], token=name, layers=[the two scan "
                         "layers with the most concept-token probability]) (= sf.steer(model, token=name, layers=[a, b], "
                         "max_kl=...)): one gain x each layer's residual norm, the KL budget shared", budget=b))
    return s


#: ``sf.steer`` as the package ships it, rated on the report half. The report half also holds the two
#: opt-in rules the package carried then, ``choose="judged"`` and ``method="distilled"`` (generated at
#: commit dfce240 with ``{"choose": "judged"}`` and ``{"method": "distilled"}``): both lost to the
#: default there (issue 40) and were removed, so a new run cannot make them
STEER_OPTIONS = {"steer-default": {}}


#: the peer package, at the same mean probe KL as the chosen default's budget (iso-KL: methods compared
#: at one price, as iso-KL calibration does)
PEER_ISO_KL = 0.5


def steer_settings() -> list[Setting]:
    return [Setting(name, "steer", f"rec = sf.steer(model, token=name, tokenizer=tok, {', '.join(f'{k}={v!r}' for k, v in opts.items())}); "
                    "its rec.edits (the model unsteered again)") for name, opts in STEER_OPTIONS.items()] + [
        Setting("steering-vectors", "peer", "steering-vectors 0.12.2 as its docs show: train_steering_vector(model, "
                "tok, bench_chat_steering's contrast pairs of the concept, layers=[n_layers // 2], read_token_index=-1); "
                f"`with vec.apply(model, multiplier=m)`, m the largest with mean probe KL <= {PEER_ISO_KL} (iso-KL)",
                budget=PEER_ISO_KL)]


def select_settings(names: str | None, fixed_layers: Sequence[int] = SMOLLM2_LAYERS) -> list[Setting]:
    every = all_settings(fixed_layers) + steer_settings()
    if not names:
        return all_settings(fixed_layers)
    by_name = {s.name: s for s in every}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise RunError(f"--settings: unknown {unknown}; valid: {', '.join(by_name)}")
    return [s for s in every if s.name in wanted]


# ---- files ----------------------------------------------------------------------------------------
#: the largest file of a run folder, or returned by a rater, that is read (the choosing half's answers.jsonl,
#: 2560 answers of 40 tokens, is 0.9 MB)
MAX_FILE_BYTES = 64 << 20
#: the longest line of a JSON-lines file that is read (an item of 40 tokens is under 2 kB)
MAX_LINE_BYTES = 1 << 20


class RunError(SystemExit):
    """A file of a run folder (or a rater's returned file), or a flag, that cannot be used as it is: one line
    naming the file and the line. Each script's ``main`` (:func:`one_line_errors`) prints it as ``error: ...``
    and exits 2; raised anywhere else it still ends the script with its line (it is a ``SystemExit``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def one_line_errors(main: Callable[..., int]) -> Callable[..., int]:
    """``main`` with a :class:`RunError` printed as one ``error:`` line on stderr and exit status 2."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except RunError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2

    return run


def read_bytes(path: Path, *, inside: Path | None = None) -> bytes:
    """The bytes of ``path`` through the one guarded door: a regular file (never a FIFO, a device or a
    folder: ``steerformer.files.read_regular`` opens it without blocking and checks it on the descriptor) of
    at most :data:`MAX_FILE_BYTES`; with ``inside``, one that resolves inside that folder (a link to a file
    elsewhere is refused: a returned folder holds its own files)."""
    from steerformer.errors import FileFormatError
    from steerformer.files import read_regular

    path = Path(path)
    if inside is not None:
        try:
            real, room = path.resolve(strict=True), Path(inside).resolve()
        except (OSError, RuntimeError) as exc:
            raise RunError(f"{path} cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
        if room not in real.parents:
            raise RunError(f"{path} is a link to {real}, outside {inside}; a returned file is read only from its own "
                           "folder. Put the file itself there.")
    try:
        return read_regular(path, max_bytes=MAX_FILE_BYTES)
    except FileFormatError as exc:
        raise RunError(str(exc)) from None


def read_json(path: Path) -> Any:
    """One JSON file (run.json, concepts.json...) through :func:`read_bytes` and the package's one JSON reader
    (nesting depth bounded, a key given twice refused)."""
    from steerformer.errors import FileFormatError
    from steerformer.results import parse_json

    raw = read_bytes(path)
    try:
        return parse_json(raw.decode("utf-8"), path, unique_keys=True)
    except UnicodeDecodeError as exc:
        raise RunError(f"{path} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})") from None
    except FileFormatError as exc:
        raise RunError(str(exc)) from None


def jsonl_lines(path: Path, *, inside: Path | None = None) -> Iterator[tuple[int, dict | str]]:
    """(line number, the line's JSON object) for every non-blank line of a JSON-lines file, or (line number,
    why it is none: longer than :data:`MAX_LINE_BYTES`, not UTF-8, not JSON, nested too deep, a key given
    twice, not an object). The file is read by :func:`read_bytes` (a FIFO, a link out of ``inside`` or a
    file over the size limit: a :class:`RunError`)."""
    from steerformer.errors import FileFormatError
    from steerformer.results import parse_json

    for n, raw in enumerate(read_bytes(path, inside=inside).split(b"\n"), 1):
        if not raw.strip():
            continue
        if len(raw) > MAX_LINE_BYTES:
            yield n, f"a line of {len(raw)} bytes, more than the {MAX_LINE_BYTES} a line of this file may have"
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield n, f"not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1})"
            continue
        try:
            row = parse_json(line, "the line", unique_keys=True)
        except FileFormatError as exc:
            yield n, f"{exc.reason}: {line[:60]!r}"
            continue
        yield n, row if isinstance(row, dict) else f"not a JSON object: {line[:60]!r}"


def numbered_jsonl(path: Path, *, inside: Path | None = None) -> list[tuple[int, dict]]:
    """(line number, JSON object) for every non-blank line of a JSON-lines file, read by :func:`jsonl_lines`;
    a bad line is one :class:`RunError` naming the file and the line."""
    rows = []
    for n, row in jsonl_lines(path, inside=inside):
        if isinstance(row, str):
            raise RunError(f"{path}:{n}: {row}")
        rows.append((n, row))
    return rows


def read_jsonl(path: Path, *, inside: Path | None = None) -> list[dict]:
    """Every JSON object of a JSON-lines file (blank lines skipped): :func:`numbered_jsonl` without the numbers."""
    return [row for _, row in numbered_jsonl(path, inside=inside)]


# ---- the run folder -----------------------------------------------------------------------------------
@dataclasses.dataclass
class Run:
    """A run folder as :func:`read_run` found it: run.json, answers.jsonl, settings.jsonl and (when made)
    key.jsonl, each checked against the others."""

    folder: Path
    header: dict
    answers: list[dict]
    facts: list[dict]
    key: list[dict] | None


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_index(x: Any, n: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n


def _check(ok: bool, where: str, field: str, value: Any, expected: str) -> None:
    if not ok:
        raise RunError(f"{where}: field {field}: {value!r:.80} is invalid (expected {expected})")


def read_run(run: Path, *, key: bool) -> Run:
    """The run folder ``run`` (generate.py's run.json, answers.jsonl and settings.jsonl; with ``key``,
    rater_files.py's key.jsonl too), every line checked: names from run.json, question indices in range and
    each line's question the one run.json holds at that index, one answer per (setting, concept, question),
    numbers finite; every key item exactly one answer with the same question, and no id twice. Anything else
    is one :class:`RunError` naming the file, the line and the field."""
    run = Path(run)
    if not run.is_dir():
        raise RunError(f"--run {run}: not a run folder (generate.py makes one: run.json, answers.jsonl, "
                       "settings.jsonl)")
    for name in ("run.json", "answers.jsonl", "settings.jsonl"):
        if not (run / name).exists() and not (run / name).is_symlink():
            raise RunError(f"--run {run}: not a run folder (it has no {name}; generate.py makes one)")
    where = str(run / "run.json")
    header = read_json(run / "run.json")
    _check(isinstance(header, dict), where, "(top level)", header, "a JSON object")
    for part, fields in (("settings", ("name", "family")), ("concepts", ("name", "description"))):
        items = header.get(part)
        _check(isinstance(items, list) and bool(items), where, part, items, "a non-empty list of objects")
        for n, item in enumerate(items):
            _check(isinstance(item, dict), where, f"{part}.{n}", item, "an object")
            for f in fields:
                _check(isinstance(item.get(f), str), where, f"{part}.{n}.{f}", item.get(f), "a string")
            why = name_problem(item["name"])
            _check(why is None, where, f"{part}.{n}.name", item["name"], why or "")
        names = [i["name"] for i in items]
        _check(len(set(names)) == len(names), where, f"{part}", sorted({x for x in names if names.count(x) > 1}),
               "distinct names")
    questions = header.get("questions")
    _check(isinstance(questions, list) and bool(questions) and all(isinstance(q, str) for q in questions), where,
           "questions", questions, "a non-empty list of strings")
    settings = {s["name"] for s in header["settings"]}
    concepts = {c["name"] for c in header["concepts"]}

    def unit(row: dict, at: str) -> None:
        for f, known in (("setting", settings), ("concept", concepts)):
            _check(isinstance(row.get(f), str) and row[f] in known, at, f, row.get(f), f"a {f} of run.json")

    def item(row: dict, at: str) -> tuple:
        unit(row, at)
        qi = row.get("question_index")
        _check(_is_index(qi, len(questions)), at, "question_index", qi, f"an integer 0-{len(questions) - 1}")
        _check(row.get("question") == questions[qi], at, "question", row.get("question"),
               f"run.json's question {qi}, {questions[qi][:40]!r}")
        return row["setting"], row["concept"], qi

    lines = numbered_jsonl(run / "answers.jsonl")
    answers = [a for _, a in lines]
    by_item: dict[tuple, int] = {}
    for n, a in lines:
        at = f"{run / 'answers.jsonl'}:{n}"
        t = item(a, at)
        _check(t not in by_item, at, "(setting, concept, question_index)", t, f"one answer each (line {by_item.get(t)} "
               "has it too)")
        by_item[t] = n
        _check(isinstance(a.get("answer"), str), at, "answer", a.get("answer"), "a string")
        kl = a.get("answer_kl")
        _check(kl is None or (_is_number(kl) and kl >= 0), at, "answer_kl", kl, "a finite number >= 0, or null")
    lines = numbered_jsonl(run / "settings.jsonl")
    facts = [f for _, f in lines]
    for n, f in lines:
        at = f"{run / 'settings.jsonl'}:{n}"
        unit(f, at)
        for k in ("probe_kl", "answer_kl"):
            _check(_is_number(f.get(k)) and f[k] >= 0, at, k, f.get(k), "a finite number >= 0")
        layers = f.get("layers", [])
        _check(isinstance(layers, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in layers), at,
               "layers", layers, "a list of layer numbers")
    keyed = None
    if key:
        path = run / "key.jsonl"
        if not path.exists() and not path.is_symlink():
            raise RunError(f"--run {run}: it has no key.jsonl yet; make the rater files first "
                           f"(python benchmarks/ratings/rater_files.py --run {run})")
        lines = numbered_jsonl(path)
        keyed = [k for _, k in lines]
        ids: dict[str, int] = {}
        items: dict[tuple, int] = {}
        for n, k in lines:
            at = f"{path}:{n}"
            i = k.get("id")
            _check(isinstance(i, str) and re.fullmatch(r"[0-9A-Za-z]{1,64}", i) is not None, at, "id", i,
                   "a string of 1-64 letters and digits")
            _check(i not in ids, at, "id", i, f"an id of one item (line {ids.get(i)} has it too)")
            ids[i] = n
            t = item(k, at)
            _check(t in by_item, at, "(setting, concept, question_index)", t,
                   "an answer of answers.jsonl (the key was made for other answers: make the rater files again)")
            _check(t not in items, at, "(setting, concept, question_index)", t, f"one item each (line {items.get(t)} "
                   "has it too)")
            items[t] = n
            files = k.get("files", {})
            _check(isinstance(files, dict) and all(isinstance(r, str) and r.isalnum() and isinstance(v, str)
                                                   for r, v in files.items()), at, "files", files,
                   "an object {rater: file name}")
    return Run(run, header, answers, facts, keyed)


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """Write (replace) a JSON-lines file atomically."""
    write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """Append lines and flush them to disk (generate.py's resumable log)."""
    with Path(path).open("a") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def default_run(half: str) -> Path:
    return HERE / half


def fmt(x: Any, nd: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"
