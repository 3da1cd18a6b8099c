"""Rated tables from the raters' returned files (PROTOCOL.md beside this file).

Reads <run>/key.jsonl, <run>/answers.jsonl and the ratings in --ratings (default <run>/ratings/):
``ratings_<R>*.jsonl``, one line per item ``{"id", "concept", "relevance", "fluency"}``, integers 0-2.
Every rater must rate every item once: a missing, unknown, repeated or out-of-range rating is one line
naming the rater, the file, the line and the id, and nothing is computed (never a silent 0).

Writes into --out (default <run>/results/):
    agreement.json/.csv   per axis: exact agreement and Cohen's kappa for every rater pair, and their mean;
                          each rater's agreement with itself on items holding the same answer (json)
    items.csv             per item: the key (concept_name: the concept), each rater's ratings, the raters' mean per axis, the aggregate
                          (harmonic mean of the three axis means; 0 when one is 0), good steer, answer KL
    settings.json/.csv    per setting: aggregate, concept, relevance, fluency, good-steer share, answer KL,
                          each with a bootstrap 95% interval (concepts resampled, then questions within
                          them; seeded), and the paired difference of the aggregate from --reference
    concepts.json/.csv    per setting and concept: the four means and the answer KL
    dose_curve.png        rated aggregate and each axis against the answer KL, one point per setting
    summary.md            the markdown tables printed

Run:  python benchmarks/ratings/collect.py --run benchmarks/ratings/choose
      python benchmarks/ratings/collect.py --smoke      (smoke answers, rater files, made-up ratings; seconds)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import data  # noqa: E402

METRICS = ("aggregate", "concept", "relevance", "fluency", "good", "answer_kl")


def harmonic(c: float, r: float, f: float) -> float:
    """AxBench's aggregate of one item: the harmonic mean of the three ratings, 0 when any is 0."""
    return 0.0 if min(c, r, f) <= 0 else 3.0 / (1.0 / c + 1.0 / r + 1.0 / f)


# ---- reading and checking --------------------------------------------------------------------------
def read_ratings(folder: Path, raters: Sequence[str], key: dict[str, dict]) -> tuple[dict, list[str]]:
    """{rater: {id: {axis: int}}} and the problems found (one line each). Each file is read by
    ``data.jsonl_lines``: a FIFO, a link out of ``folder``, a file or line over the size limit, bytes that
    are not UTF-8, a line that is not one JSON object (or gives a key twice) is a problem of its own."""
    problems: list[str] = []
    got: dict[str, dict] = {}
    if not folder.is_dir():
        problems.append(f"--ratings {folder}: no such folder (the raters' ratings_<R>_NN.jsonl go there)")
        return got, problems
    for r in raters:
        files = sorted(p for p in folder.glob(f"ratings_{r}*.jsonl") if re.fullmatch(rf"ratings_{r}(_\w+)?\.jsonl", p.name))
        if not files:
            problems.append(f"rater {r}: no ratings_{r}*.jsonl in {folder}")
            continue
        mine: dict[str, dict] = {}
        where: dict[str, str] = {}
        for path in files:
            try:
                lines = list(data.jsonl_lines(path, inside=folder))
            except data.RunError as exc:
                problems.append(f"rater {r}: {exc.message}")
                continue
            for n, row in lines:
                at = f"rater {r}: {path.name}:{n}"
                if isinstance(row, str):
                    problems.append(f"{at}: {row}")
                    continue
                i = row.get("id")
                if not isinstance(i, str):
                    problems.append(f"{at}: \"id\" = {i!r:.60} (expected the item's id, a string)")
                    continue
                if i not in key:
                    problems.append(f"{at}: id {i[:60]!r} is no item of key.jsonl")
                    continue
                if i in mine:
                    problems.append(f"{at}: id {i} rated twice (first in {where[i]})")
                    continue
                bad = [a for a in data.AXES if type(row.get(a)) is not int or row.get(a) not in (0, 1, 2)]
                if bad:
                    problems.append(f"{at}: id {i}: " + ", ".join(f"{a} = {row.get(a)!r:.20}" for a in bad)
                                    + " (each axis: an integer 0, 1 or 2)")
                    continue
                mine[i] = {a: row[a] for a in data.AXES}
                where[i] = f"{path.name}:{n}"
        missing = [i for i in key if i not in mine]
        for i in missing:
            problems.append(f"rater {r}: id {i} not rated (it is in raters/{r}/{key[i]['files'].get(r, '?')})")
        got[r] = mine
    return got, problems


# ---- the numbers -----------------------------------------------------------------------------------
def agreement(ratings: dict[str, dict], ids: Sequence[str]) -> dict:
    from steerformer.steering.evaluation.agreement import cohen_kappa, exact_agreement

    raters = sorted(ratings)
    pairs = [(a, b) for i, a in enumerate(raters) for b in raters[i + 1:]]
    out: dict = {"raters": raters, "items": len(ids), "axes": {}}
    for axis in data.AXES:
        rows = {}
        for a, b in pairs:
            x = [ratings[a][i][axis] for i in ids]
            y = [ratings[b][i][axis] for i in ids]
            rows[f"{a}-{b}"] = {"exact": exact_agreement(x, y), "kappa": cohen_kappa(x, y)}
        mean = {k: sum(v[k] for v in rows.values()) / len(rows) for k in ("exact", "kappa")} if rows else {}
        spread = {r: [sum(ratings[r][i][axis] == v for i in ids) for v in (0, 1, 2)] for r in raters}
        out["axes"][axis] = {"pairs": rows, "mean": mean, "counts_0_1_2": spread}
    return out


def self_agreement(ratings: dict[str, dict], key: dict[str, dict], texts: dict[tuple, str]) -> dict:
    """Each rater against itself: the exact agreement per axis over the pairs of items that hold the same
    answer text to the same question for the same concept (settings that gave identical answers)."""
    groups: dict[tuple, list[str]] = {}
    for i, k in key.items():
        t = texts.get((k["setting"], k["concept"], k["question_index"]))
        groups.setdefault((k["concept"], k["question_index"], t), []).append(i)
    pairs = [(a, b) for g in groups.values() for n, a in enumerate(g) for b in g[n + 1:]]
    out: dict = {"pairs": len(pairs), "raters": {}}
    for r in sorted(ratings):
        out["raters"][r] = {axis: (sum(ratings[r][a][axis] == ratings[r][b][axis] for a, b in pairs) / len(pairs)
                                   if pairs else None) for axis in data.AXES}
    return out


def item_table(key: dict[str, dict], ratings: dict[str, dict], kl: dict[tuple, float]) -> list[dict]:
    raters = sorted(ratings)
    rows = []
    for i, k in key.items():
        means = {a: sum(ratings[r][i][a] for r in raters) / len(raters) for a in data.AXES}
        rows.append({"id": i, "setting": k["setting"], "concept_name": k["concept"], "question_index": k["question_index"],
                     **{f"{a}_{r}": ratings[r][i][a] for r in raters for a in data.AXES},
                     **means, "aggregate": harmonic(*(means[a] for a in data.AXES)),
                     "good": float(all(means[a] >= 1 for a in data.AXES)),
                     "answer_kl": kl.get((k["setting"], k["concept"], k["question_index"]))})
    return rows


def bootstrap(items: list[dict], settings: Sequence[str], *, reps: int, seed: int, reference: str | None) -> dict:
    """Per setting, each metric's mean and a 95% percentile interval: resample the concepts, then the
    questions within each drawn concept (the same draws for every setting: differences are paired)."""
    import numpy as np

    concepts = sorted({r["concept_name"] for r in items})
    questions = sorted({r["question_index"] for r in items})
    ci, qi = {c: n for n, c in enumerate(concepts)}, {q: n for n, q in enumerate(questions)}
    grid = np.full((len(settings), len(concepts), len(questions), len(METRICS)), np.nan)
    si = {s: n for n, s in enumerate(settings)}
    for r in items:
        grid[si[r["setting"]], ci[r["concept_name"]], qi[r["question_index"]]] = [
            np.nan if r[m] is None else r[m] for m in METRICS]
    rng = np.random.default_rng(seed)
    cdraw = rng.integers(0, len(concepts), size=(reps, len(concepts)))
    qdraw = rng.integers(0, len(questions), size=(reps, len(concepts), len(questions)))
    boots = np.empty((len(settings), reps, len(METRICS)))
    with warnings.catch_warnings():  # a resample of items whose KL is undefined (empty base answers) is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        for s in range(len(settings)):
            picked = grid[s][cdraw[:, :, None], qdraw]  # (reps, C, Q, M)
            boots[s] = np.nanmean(picked.reshape(reps, -1, len(METRICS)), axis=1)
        point = np.nanmean(grid.reshape(len(settings), -1, len(METRICS)), axis=1)
    out = {}
    ref = si.get(reference) if reference else None
    for s, name in enumerate(settings):
        row = {}
        for m, metric in enumerate(METRICS):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, hi = np.nanpercentile(boots[s, :, m], [2.5, 97.5])
            row[metric] = {"mean": float(point[s, m]), "lo": float(lo), "hi": float(hi)}
        if ref is not None:
            d = boots[s, :, 0] - boots[ref, :, 0]
            lo, hi = np.percentile(d, [2.5, 97.5])
            row["aggregate_minus_reference"] = {"mean": float(point[s, 0] - point[ref, 0]), "lo": float(lo),
                                                "hi": float(hi), "reference": reference}
        out[name] = row
    return {"reps": reps, "seed": seed, "concepts": concepts, "questions": len(questions), "settings": out}


def concept_table(items: list[dict], settings: Sequence[str]) -> list[dict]:
    rows = []
    for s in settings:
        for c in sorted({r["concept_name"] for r in items}):
            mine = [r for r in items if r["setting"] == s and r["concept_name"] == c]
            if mine:
                rows.append({"setting": s, "concept_name": c, "n": len(mine), **{
                    m: sum(r[m] for r in mine if r[m] is not None) / max(1, sum(r[m] is not None for r in mine))
                    for m in METRICS}})
    return rows


# ---- writing -----------------------------------------------------------------------------------------
def csv_text(rows: list[dict]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def ci_text(x: dict, nd: int = 2) -> str:
    return f"{x['mean']:.{nd}f} [{x['lo']:.{nd}f}, {x['hi']:.{nd}f}]"


def markdown(agree: dict, boot: dict, facts: dict[str, dict], concepts: list[dict], settings: Sequence[str]) -> str:
    lines = [f"## Agreement ({agree['items']} items, raters {', '.join(agree['raters'])})", "",
             "| axis | " + " | ".join(f"{p} exact / kappa" for p in next(iter(agree["axes"].values()))["pairs"])
             + " | mean exact / kappa | counts 0/1/2 per rater |",
             "|---|" + "---|" * (len(next(iter(agree["axes"].values()))["pairs"]) + 2)]
    for axis, a in agree["axes"].items():
        cells = [f"{v['exact']:.2f} / {v['kappa']:.2f}" for v in a["pairs"].values()]
        mean = f"{a['mean']['exact']:.2f} / {a['mean']['kappa']:.2f}" if a["mean"] else "n/a"
        counts = "; ".join(f"{r}: {'/'.join(map(str, c))}" for r, c in a["counts_0_1_2"].items())
        lines.append(f"| {axis} | " + " | ".join(cells) + f" | {mean} | {counts} |")
    me = agree.get("self")
    if me and me["pairs"]:
        lines += ["", f"Each rater against itself on {me['pairs']} pairs of items holding the same answer to the same "
                  "question for the same concept (exact agreement, concept / relevance / fluency): " + "; ".join(
                      f"{r}: " + " / ".join(f"{v[a]:.2f}" for a in data.AXES) for r, v in me["raters"].items())]
    ref = next((r["aggregate_minus_reference"]["reference"] for r in boot["settings"].values()
                if "aggregate_minus_reference" in r), None)
    lines += ["", f"## Per setting (mean of raters per item; 95% bootstrap intervals over {len(boot['concepts'])} "
              f"concepts x {boot['questions']} questions, {boot['reps']} resamples)", "",
              "| setting | aggregate | concept | relevance | fluency | good steers | answer KL | probe KL | layers |"
              + (f" aggregate - {ref} |" if ref else ""),
              "|---|---|---|---|---|---|---|---|---|" + ("---|" if ref else "")]
    for s in settings:
        r = boot["settings"][s]
        f = facts.get(s, {})
        diff = f" {ci_text(r['aggregate_minus_reference'])} |" if ref else ""
        lines.append(f"| {s} | {ci_text(r['aggregate'])} | {ci_text(r['concept'])} | {ci_text(r['relevance'])} | "
                     f"{ci_text(r['fluency'])} | {ci_text(r['good'])} | {ci_text(r['answer_kl'], 3)} | "
                     f"{data.fmt(f.get('probe_kl'))} | {f.get('layers') or '-'} |{diff}")
    names = sorted({r["concept_name"] for r in concepts})
    lines += ["", "## Per concept (mean aggregate)", "", "| setting | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names)]
    for s in settings:
        by = {r["concept_name"]: r["aggregate"] for r in concepts if r["setting"] == s}
        lines.append(f"| {s} | " + " | ".join(data.fmt(by.get(c), 2) for c in names) + " |")
    return "\n".join(lines) + "\n"


#: families whose settings are different methods or wordings, not one construction at several doses: not joined
UNJOINED = ("base", "prompt", "steer", "peer")


def figure(boot: dict, settings: Sequence[str], families: dict[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(2, 2, figsize=(13, 9.5), sharex=True)
    axes = grid.ravel()
    fams = sorted(set(families.values()))
    colors = {f: plt.get_cmap("tab10")(i % 10) for i, f in enumerate(fams)}
    for ax, metric in zip(axes, ("aggregate", "concept", "relevance", "fluency")):
        for fam in fams:
            names = [s for s in settings if families.get(s) == fam]
            pts = sorted(((boot["settings"][s]["answer_kl"]["mean"], boot["settings"][s][metric], s) for s in names),
                         key=lambda p: (p[0], p[2]))
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1]["mean"] for p in pts]
            err = [[p[1]["mean"] - p[1]["lo"] for p in pts], [p[1]["hi"] - p[1]["mean"] for p in pts]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=2, color=colors[fam], label=fam,
                        linestyle="-" if len(pts) > 1 and fam not in UNJOINED else "none")
            # every point named where few are drawn; else the dose family's, the prompts' and the base's only
            # (the others are told apart by colour: their names overlap at one KL)
            if len(settings) <= 10 or fam in ("kl", "prompt", "base"):
                for x, y, p in zip(xs, ys, pts):
                    ax.annotate(p[2], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.set_xlim(left=-0.02)
        ax.set_xlabel("answer KL(base || steered), nats/token")
        ax.set_ylabel(f"rated {metric} (0-2, mean of raters)")
        ax.set_ylim(-0.05, 2.05)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"rated dose curve: {len(boot['concepts'])} concepts x {boot['questions']} questions, 95% bootstrap "
                 "intervals", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def collect(run: Path, ratings_dir: Path, out: Path, raters: Sequence[str] | None, *, reps: int = 2000, seed: int = 0,
            reference: str | None = "kl-0.3") -> int:
    if reps < 1:
        raise data.RunError(f"--reps {reps}: at least 1 bootstrap resample (2000 for the reported intervals)")
    the_run = data.read_run(run, key=True)
    key_rows = the_run.key
    key = {k["id"]: k for k in key_rows}
    raters = list(raters) if raters else sorted({r for k in key_rows for r in k.get("files", {})})
    if len(set(raters)) != len(raters) or not all(r.isalnum() for r in raters) or len(raters) < 2:
        raise data.RunError(f"--raters {','.join(raters)!r}: at least two distinct raters, each a name of letters and "
                            "digits (agreement is between raters)")
    unrated = len(the_run.answers) - len(key_rows)
    if unrated:
        print(f"note: {unrated} answers of {run / 'answers.jsonl'} are no item of key.jsonl (made after the rater "
              "files): the tables leave them out", file=sys.stderr)
    got, problems = read_ratings(ratings_dir, raters, key)
    if problems:
        shown = problems[:30]
        print("\n".join(shown), file=sys.stderr)
        if len(problems) > len(shown):
            print(f"... and {len(problems) - len(shown)} more problems", file=sys.stderr)
        print(f"{len(problems)} problems in the ratings of {ratings_dir}: nothing computed", file=sys.stderr)
        return 2
    header = the_run.header
    order = [s["name"] for s in header["settings"]]
    families = {s["name"]: s["family"] for s in header["settings"]}
    answers = the_run.answers
    kl = {(a["setting"], a["concept"], a["question_index"]): a.get("answer_kl") for a in answers}
    texts = {(a["setting"], a["concept"], a["question_index"]): a["answer"] for a in answers}
    facts_rows = the_run.facts
    ids = list(key)
    agree = agreement(got, ids)
    agree["self"] = self_agreement(got, key, texts)
    items = item_table(key, got, kl)
    settings = [s for s in order if any(r["setting"] == s for r in items)]
    if reference not in settings:
        reference = None
    boot = bootstrap(items, settings, reps=reps, seed=seed, reference=reference)
    facts: dict[str, dict] = {}
    for s in settings:
        fs = [f for f in facts_rows if f["setting"] == s]
        if fs:
            facts[s] = {"probe_kl": sum(f["probe_kl"] for f in fs) / len(fs),
                        "answer_kl_token_weighted": sum(f["answer_kl"] for f in fs) / len(fs),
                        "layers": sorted({k for f in fs for k in f.get("layers", [])}),
                        "family": families.get(s)}
            boot["settings"][s]["facts"] = facts[s]
    concepts = concept_table(items, settings)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise data.RunError(f"--out {out}: not a folder that can be written ({exc.strerror or exc})") from None
    data.write_text(out / "agreement.json", json.dumps(agree, indent=1) + "\n")
    data.write_text(out / "agreement.csv", csv_text([
        {"axis": axis, "pair": p, **v} for axis, a in agree["axes"].items()
        for p, v in [*a["pairs"].items(), ("mean", a["mean"])]]))
    data.write_text(out / "items.csv", csv_text(items))
    data.write_text(out / "settings.json", json.dumps(boot, indent=1) + "\n")
    data.write_text(out / "settings.csv", csv_text([
        {"setting": s, "family": families.get(s), **{f"{m}_{k}": boot["settings"][s][m][k] for m in METRICS
                                                     for k in ("mean", "lo", "hi")},
         "probe_kl": facts.get(s, {}).get("probe_kl")} for s in settings]))
    data.write_text(out / "concepts.json", json.dumps(concepts, indent=1) + "\n")
    data.write_text(out / "concepts.csv", csv_text(concepts))
    figure(boot, settings, families, out / "dose_curve.png")
    text = markdown(agree, boot, facts, concepts, settings)
    data.write_text(out / "summary.md", text)
    print(text)
    print(f"written: {out}/{{agreement,settings,concepts}}.{{json,csv}}, items.csv, dose_curve.png, summary.md")
    return 0


# ---- the smoke run -------------------------------------------------------------------------------
def fake_ratings(run: Path, folder: Path, *, seed: int = 0, drop: int = 0) -> None:
    """Made-up ratings for the smoke run: a value per item from a seeded draw, each rater changing it
    on about one item in five; ``drop`` items left unrated by the first rater."""
    key = data.read_jsonl(run / "key.jsonl")
    raters = sorted({r for k in key for r in k["files"]})
    truth = {k["id"]: {a: random.Random(f"{seed}-{k['id']}-{a}").randint(0, 2) for a in data.AXES} for k in key}
    folder.mkdir(parents=True, exist_ok=True)
    for n, r in enumerate(raters):
        rng = random.Random(f"{seed}-{r}")
        by_file: dict[str, list] = {}
        for k in key[drop if n == 0 else 0:]:
            row = {"id": k["id"], **{a: (v if rng.random() > 0.2 else rng.randint(0, 2)) for a, v in truth[k["id"]].items()}}
            by_file.setdefault(k["files"][r].replace("rater_", "ratings_"), []).append(row)
        for name, rows in by_file.items():
            data.write_jsonl(folder / name, rows)


@data.one_line_errors
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=None, help="the run folder (default benchmarks/ratings/choose)")
    ap.add_argument("--ratings", default=None, help="folder of the returned ratings_<R>*.jsonl (default <run>/ratings)")
    ap.add_argument("--out", default=None, help="where the tables go (default <run>/results)")
    ap.add_argument("--raters", default=None, help="comma-separated raters (default: every rater of key.jsonl)")
    ap.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference", default="kl-0.3", help="the setting others' aggregates are compared with")
    ap.add_argument("--smoke", action="store_true", help="smoke answers, rater files and made-up ratings first")
    args = ap.parse_args(argv)
    if args.smoke and args.run is None:
        import generate
        import rater_files

        args.run = tempfile.mkdtemp(prefix="ratings-smoke-")
        generate.main(["--smoke", "--out", args.run])
        rater_files.main(["--run", args.run, "--chunk", "25"])
        fake_ratings(Path(args.run), Path(args.run) / "ratings")
        args.reps = min(args.reps, 200)
    run = Path(args.run) if args.run else data.default_run("choose")
    raters = [r.strip() for r in args.raters.split(",")] if args.raters else None
    return collect(run, Path(args.ratings) if args.ratings else run / "ratings",
                   Path(args.out) if args.out else run / "results", raters, reps=args.reps, seed=args.seed,
                   reference=args.reference)


if __name__ == "__main__":
    sys.exit(main())
