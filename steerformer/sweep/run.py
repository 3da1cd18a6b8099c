"""`steerformer sweep`: analyze many checkpoints (Pythia-style revisions, or several models).

Work is split into tasks: one per (checkpoint, distinct weight slot) for the spectrum — each task
opens the checkpoint itself and reads only that layer's value/output tensors — plus, with
statistics, one per checkpoint for the power-method statistics (the dynamics run through every
layer). A finished task's result is written at once to ``out/tasks/<checkpoint>/<task>.json``
(atomically), so an interrupted sweep rerun with the same options recomputes only what is missing.

Every task runs its BLAS and torch single-threaded, wherever it runs: the local executor and Ray
then give bit-identical numbers, and the parallelism comes from running tasks side by side.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .._text import csv_text
from ..configs import EIG_DTYPES, StatsConfig, check_device, select_layers, torch_dtype
from ..eig import DEFAULT_TOP_K, FULL_UP_TO, one_blas_thread
from ..errors import bad_argument
from ..loading import open_source
from ..matrices import layer_matrices
from ..outputs import SWEEP, check_output_folder
from ..results import JsonResult, json_text, read_json
from ..spectra import spectra
from ..stats.run import power_method_stats

EXECUTORS = ("local", "ray")
#: Per-layer columns of the combined CSV (λ complex split in re/im); the statistics columns follow
#: when the sweep ran them.
CSV_COLUMNS = ("checkpoint", "model", "revision", "layer", "slot", "lambda1_re", "lambda1_im", "gap",
               "relative_gap", "case", "spectral_radius", "eig_method")
STATS_COLUMNS = ("delta_rho_mean", "P", "baseline_delta_mean", "baseline_P", "power_method_step")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One model at one revision (None: the default branch / the folder as it is)."""

    model: str
    revision: str | None = None

    @property
    def label(self) -> str:
        return self.revision if self.revision is not None else Path(self.model).name or self.model

    @property
    def key(self) -> str:
        """A folder name unique to this checkpoint, never hidden: ``./ckpt`` gives ``ckpt``, not
        ``._ckpt``."""
        raw = f"{self.model}@{self.revision}" if self.revision is not None else self.model
        return re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._-") or "checkpoint"


def checkpoints_from(model: str | None = None, revisions: Sequence[str] | str | None = None,
                     models: Sequence[str] | str | None = None) -> list[Checkpoint]:
    """``model`` with ``revisions`` (one checkpoint per revision), or ``models`` (one per model)."""
    split = lambda v: [x.strip() for x in v.split(",") if x.strip()] if isinstance(v, str) else list(v or [])  # noqa: E731
    revs, mods = split(revisions), split(models)
    if mods and (model is not None or revs):
        raise bad_argument("--models", ",".join(mods), "either MODEL with --revisions, or --models alone")
    if mods:
        out = [Checkpoint(m) for m in mods]
    elif model is not None:
        out = [Checkpoint(model, r) for r in revs] if revs else [Checkpoint(model)]
    else:
        raise bad_argument("model", None, "a MODEL (with --revisions a,b,c) or --models a,b,c")
    if len({c.key for c in out}) != len(out):
        raise bad_argument("--revisions" if revs else "--models", ",".join(revs or mods), "distinct checkpoints")
    return out


@contextlib.contextmanager
def _single_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with one_blas_thread():
            yield
    finally:
        torch.set_num_threads(n)


def _same_work(saved: dict | None, task: dict) -> bool:
    """A stored task answers ``task`` when it asked for the same work; the device it ran on does
    not matter (the numbers agree to rounding)."""
    return saved is not None and {k: v for k, v in saved.items() if k != "device"} == task


def _run_task(task: dict) -> dict:
    """One task, single-threaded: the spectrum of one layer of one checkpoint (reading only that
    layer's value/output tensors), or the power-method statistics of one checkpoint (per-step Δρ, P
    and their baselines)."""
    dtype, device = torch_dtype(task["dtype"]), task.get("device")
    with _single_thread():
        src = open_source(task["model"], revision=task["revision"])
        if task["kind"] == "spectrum":
            layer, top_k = task["layer"], task["top_k"]
            mats = layer_matrices(src, [layer], form=False)
            d = mats.d_model
            sp = spectra(mats, dtype=dtype, top_k=top_k if top_k is not None and top_k <= d - 2 else None, device=device)
            return {"layer": layer, "slot": mats.slot_ids[0], "d_model": d, **sp.record(0),
                    "eig_method": sp.method[0], "source": src.meta()}
        rep = power_method_stats(src, StatsConfig(**task["options"]), dtype=dtype, device=device)
        keep = ("step", "layer") + STATS_COLUMNS
        return {"summary": rep.summary(), "layers": [{k: r.get(k) for k in keep} for r in rep.controlled.layers]}


@dataclasses.dataclass
class SweepResult(JsonResult):
    """Per-checkpoint reports, the combined table, and how many tasks ran vs were reused."""

    checkpoints: list[Checkpoint]
    reports: dict[str, dict]  # checkpoint key → {"meta": ..., "layers": [...], "stats": ...}
    rows: list[dict]
    tasks_run: int
    tasks_reused: int
    executor: str
    out_dir: Path | None = None

    def to_csv(self, path: str | Path | None = None) -> str:
        cols = CSV_COLUMNS + (STATS_COLUMNS if any("P" in r for r in self.rows) else ())
        return csv_text(cols, ([r.get(c, "") for c in cols] for r in self.rows), path)

    def to_dict(self) -> dict:
        """Plain data: the checkpoints, the executor, the task counts, every report and the rows."""
        return {"checkpoints": [dataclasses.asdict(c) | {"key": c.key} for c in self.checkpoints],
                "executor": self.executor, "tasks_run": self.tasks_run, "tasks_reused": self.tasks_reused,
                "reports": self.reports, "rows": self.rows}

    @classmethod
    def load(cls, out_dir: str | Path) -> "SweepResult":
        """The sweep :meth:`save` wrote into ``out_dir`` (from its ``sweep.json``)."""
        doc = read_json(Path(out_dir) / "sweep.json")
        cks = [Checkpoint(c["model"], c.get("revision")) for c in doc["checkpoints"]]
        return cls(cks, doc["reports"], doc.get("rows", []), tasks_run=doc["tasks_run"],
                   tasks_reused=doc["tasks_reused"], executor=doc["executor"], out_dir=Path(out_dir))

    def summary(self) -> str:
        """One line per checkpoint: its label and λ1 of each analysed layer."""
        lines = [f"sweep of {len(self.checkpoints)} checkpoint(s), {self.executor} executor: "
                 f"{self.tasks_run} tasks run, {self.tasks_reused} reused"]
        for c in self.checkpoints:
            lam = [f"{r['lambda1_re']:.4g}" for r in self.rows if r["checkpoint"] == c.key and "lambda1_re" in r]
            lines.append(f"  {c.label}: Re λ1 per layer {', '.join(lam)}")
        return "\n".join(lines)

    def plot(self, out_dir: str | Path) -> list[Path]:
        """λ1, gap (and Δρ, P with statistics) against the checkpoint, one line per layer."""
        from matplotlib.figure import Figure

        from ..plotting import save_figure

        labels = [c.label for c in self.checkpoints]
        panels = [("lambda1_re", "Re λ1"), ("gap", "gap Re λ1 − Re λ2")]
        if any("P" in r for r in self.rows):
            panels += [("delta_rho_mean", "Δρ (controlled)"), ("P", "P (controlled)")]
        fig = Figure(figsize=(4.2 * len(panels), 3.6))
        layers = sorted({r["layer"] for r in self.rows})
        for i, (col, name) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            for k in layers:
                ys = [next((r.get(col) for r in self.rows if r["checkpoint"] == c.key and r["layer"] == k), None)
                      for c in self.checkpoints]
                ax.plot(range(len(labels)), [float("nan") if y is None else y for y in ys], marker="o",
                        lw=1, ms=3, label=f"layer {k}")
            ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=7)
            ax.set(title=name, xlabel="checkpoint", ylabel=name)
        if len(layers) <= 12:
            fig.axes[0].legend(fontsize=6)
        fig.tight_layout()
        return [save_figure(fig, Path(out_dir) / "sweep.png")]

    def save(self, out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """One ``<checkpoint>/report.json`` each, ``sweep.csv``, ``sweep.json`` and ``sweep.png``;
        returns the paths by role (``csv``, ``json``, ``<checkpoint>/report.json``, figure names)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written: dict[str, Path] = {}
        for c in self.checkpoints:
            d = out / c.key
            d.mkdir(exist_ok=True)
            written[f"{c.key}/report.json"] = d / "report.json"
            json_text(self.reports[c.key], d / "report.json")
        written["csv"], written["json"] = out / "sweep.csv", out / "sweep.json"
        self.to_csv(written["csv"])
        self.to_json(written["json"])
        if plots:
            written.update({p.name: p for p in self.plot(out)})
        return written


def _fingerprint(src: Any) -> dict:
    """What identifies a checkpoint's weights: the Hub snapshot's commit, else (a local folder) the
    name, size and modification time of every file in it — re-saving other weights into the same
    folder changes it, so stale task results are never reused."""
    if src.commit:
        return {"commit": src.commit}
    if src.path is None:
        return {}
    return {"files": sorted([f.name, f.stat().st_size, f.stat().st_mtime_ns]
                            for f in Path(src.path).iterdir() if f.is_file())}


def _atomic_json(obj: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _execute_local(todo: list[dict], done: Callable[[dict, dict], None], workers: int) -> None:
    if workers <= 1 or len(todo) <= 1:
        for t in todo:
            done(t, _run_task(t))
        return
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futs = {pool.submit(_run_task, t): t for t in todo}
        for f in cf.as_completed(futs):
            done(futs[f], f.result())


def _execute_ray(todo: list[dict], done: Callable[[dict, dict], None], address: str | None,
                 num_cpus: int | None) -> None:
    try:
        import ray
    except ImportError as exc:
        raise bad_argument("--executor", "ray", "'local', or install the ray extra",
                           "pip install 'steerformer[ray]'") from exc
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, log_to_driver=False,
                 **({"address": address} if address else {"num_cpus": num_cpus}))
    try:
        remote = ray.remote(num_cpus=1)(_run_task)
        refs = {remote.remote(t): t for t in todo}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for r in ready:
                done(refs.pop(r), ray.get(r))
    finally:
        if started:
            ray.shutdown()


def sweep(checkpoints: Sequence[Checkpoint], out_dir: str | Path, *, layers: Sequence[int] | None = None,
          top_k: int | None | str = "auto", dtype: str = "float64", stats: dict | None = None, executor: str = "local",
          workers: int = 1, ray_address: str | None = None, plots: bool = True,
          device: str | None = None) -> SweepResult:
    """Run the spectra (and with ``stats`` — StatsConfig fields as a dict — the statistics) of every
    checkpoint, one task per (checkpoint, distinct layer), resuming from ``out_dir/tasks``.

    ``top_k``: as in :func:`steerformer.analyze.analyze` for spectra-only runs ("auto": full up to
    d = 2048, 16 above); with ``stats`` the full spectrum is always computed. ``executor``: "local"
    (``workers`` processes; 1 = in this process) or "ray" (``ray_address`` None starts a local
    instance with ``workers`` CPUs; "auto" joins a running cluster). ``device``: where each task
    runs its eigen-solver and dynamics (as ``analyze --device``); results equal to rounding on any
    device, so a finished task is reused whatever device it ran on.
    """
    if executor not in EXECUTORS:
        raise bad_argument("--executor", executor, f"one of {', '.join(EXECUTORS)}")
    if dtype not in EIG_DTYPES:
        raise bad_argument("--dtype", dtype, "float64 or float32")
    if not isinstance(workers, int) or workers < 1:
        raise bad_argument("--workers", workers, "an integer ≥ 1")
    check_device(device, name="--device", kinds=("cpu", "cuda"))
    if top_k not in ("auto", None) and not (isinstance(top_k, int) and top_k >= 0):
        raise bad_argument("--top-k", top_k, "a non-negative integer")
    if stats is not None:
        StatsConfig(**stats)  # checks the options before any work
    checkpoints = list(checkpoints)
    # our own earlier sweep resumes in place; anything else (the cwd, an input checkpoint, a foreign
    # folder) is refused before any work
    out = check_output_folder(out_dir, SWEEP, inputs=[c.model for c in checkpoints], incremental=True)
    store = out / "tasks"
    plan: list[tuple[dict, Path]] = []
    meta: dict[str, dict] = {}
    slot_paths: dict[str, list[Path]] = {}  # checkpoint key → the task file of each analysed layer's slot
    planned: set[Path] = set()
    for c in checkpoints:
        src = open_source(c.model, revision=c.revision)  # config only: fails fast on a bad checkpoint
        ad = src.adapter
        ids = select_layers(layers, ad.n_layers, name="--layers")
        seq = ad.layer_sequence()
        k_eff = None if stats is not None or top_k in (None, 0) else (
            top_k if isinstance(top_k, int) else (DEFAULT_TOP_K if ad.d_model > FULL_UP_TO else None))
        meta[c.key] = {**src.meta(), "config": ad.config_summary(), "layers_analyzed": ids, "top_k": k_eff,
                       "eig_dtype": dtype, "stats_options": stats}
        weights = _fingerprint(src)  # a finished task is reused only for the very same weights
        slot_paths[c.key] = [store / c.key / f"slot_{seq[k]:04d}.json" for k in ids]
        for k, path in zip(ids, slot_paths[c.key]):
            if path not in planned:  # each distinct slot once, at its first analysed layer
                planned.add(path)
                plan.append(({"kind": "spectrum", "model": c.model, "revision": c.revision, "layer": k,
                              "top_k": k_eff, "dtype": dtype, "weights": weights}, path))
        if stats is not None:
            plan.append(({"kind": "stats", "model": c.model, "revision": c.revision,
                          "options": stats, "dtype": dtype, "weights": weights}, store / c.key / "stats.json"))
    store.mkdir(parents=True, exist_ok=True)
    _atomic_json({"checkpoints": [dataclasses.asdict(c) for c in checkpoints]}, store / "plan.json")
    results: dict[Path, dict] = {}
    todo: list[dict] = []
    where: dict[int, Path] = {}
    for task, path in plan:
        if path.is_file():
            saved = json.loads(path.read_text())
            if _same_work(saved.get("task"), task):
                results[path] = saved["result"]
                continue
        task = {**task, "device": device}
        where[id(task)] = path
        todo.append(task)
    reused = len(results)
    for p in {where[id(t)].parent for t in todo}:
        p.mkdir(parents=True, exist_ok=True)

    def done(task: dict, result: dict) -> None:
        path = where[id(task)]
        _atomic_json({"task": task, "result": result}, path)
        results[path] = result

    if executor == "local":
        _execute_local(todo, done, workers)
    else:
        # Ray returns copies of the task dicts' keys only through our mapping: look up by identity.
        _execute_ray(todo, done, ray_address, workers)

    reports: dict[str, dict] = {}
    rows: list[dict] = []
    for c in checkpoints:
        recs = [{**{k: v for k, v in results[path].items() if k != "source"}, "layer": k}
                for k, path in zip(meta[c.key]["layers_analyzed"], slot_paths[c.key])]
        stats_res = results.get(store / c.key / "stats.json") if stats is not None else None
        reports[c.key] = {"meta": meta[c.key], "layers": recs}
        if stats_res is not None:
            reports[c.key]["stats"] = stats_res
        st = {r["layer"]: r for r in (stats_res or {}).get("layers", [])}
        for r in recs:
            row = {"checkpoint": c.key, "model": c.model, "revision": c.revision or "", "layer": r["layer"],
                   "slot": r["slot"], "lambda1_re": r["lambda1"][0], "lambda1_im": r["lambda1"][1],
                   "gap": r["gap"], "relative_gap": r["relative_gap"], "case": r["case"],
                   "spectral_radius": r["spectral_radius"], "eig_method": r.get("eig_method", "full")}
            if r["layer"] in st:
                row.update({k: st[r["layer"]].get(k) for k in STATS_COLUMNS})
            rows.append(row)
    res = SweepResult(checkpoints, reports, rows, tasks_run=len(todo), tasks_reused=reused,
                      executor=executor, out_dir=out)
    res.save(out, plots=plots)
    return res
