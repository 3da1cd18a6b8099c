"""The rating set's data (PROTOCOL.md beside this file): the concepts and their split, the questions,
the named settings whose answers are rated, and the JSON-lines files every step reads and writes.

Torch-free: ``rater_files.py`` and ``collect.py`` need nothing but this module and the standard
library (``collect.py`` imports the package's Cohen's κ, which is pure Python too)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

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


def load_concepts(half: str | None = None, path: Path = HERE / "concepts.json") -> list[Concept]:
    """The concepts (of ``half``), sorted by name; the file's shape is checked."""
    raw = json.loads(Path(path).read_text())
    concepts = [Concept(**{k: c[k] for k in ("name", "description", "half")}) for c in raw]
    names = [c.name for c in concepts]
    bad = [c.name for c in concepts if c.half not in HALVES or not c.name.strip() or not c.description.strip()]
    if bad or len(set(names)) != len(names):
        raise SystemExit(f"{path}: every concept needs a unique name, a description and a half in {HALVES} "
                         f"(bad: {bad or sorted({n for n in names if names.count(n) > 1})})")
    if half is not None:
        if half not in HALVES:
            raise SystemExit(f"--half {half!r}: one of {', '.join(HALVES)}")
        concepts = [c for c in concepts if c.half == half]
    return sorted(concepts, key=lambda c: c.name)


def load_questions(path: Path = HERE / "questions.json") -> list[str]:
    """The questions, in the file's order (their index is the question's number in every file)."""
    qs = [str(q) for q in json.loads(Path(path).read_text())]
    if len(set(qs)) != len(qs) or not qs:
        raise SystemExit(f"{path}: a non-empty list of distinct questions")
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
        raise SystemExit(f"--settings: unknown {unknown}; valid: {', '.join(by_name)}")
    return [s for s in every if s.name in wanted]


# ---- files ----------------------------------------------------------------------------------------
def read_jsonl(path: Path) -> list[dict]:
    """Every JSON object of a JSON-lines file (blank lines skipped); a bad line is one error naming it."""
    rows = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{i}: not a JSON object ({e.msg}): {line[:80]!r}")
        if not isinstance(row, dict):
            raise SystemExit(f"{path}:{i}: not a JSON object: {line[:80]!r}")
        rows.append(row)
    return rows


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
