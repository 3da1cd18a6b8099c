"""`analyze`: layer matrices and their spectra, as one report (JSON, NPZ, CSV, figures)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from . import plotting
from .version import __version__
from ._text import csv_text
from .results import VERSION_KEY, JsonResult, read_json
from .configs import EIG_DTYPES, StatsConfig, torch_dtype
from .eig import CPU_BACKEND, DEFAULT_TOP_K, FULL_UP_TO, resolve_device
from .errors import bad_argument
from .loading import as_source
from .matrices import LayerMatrices, layer_matrices
from .spectra import Spectra, default_workers, spectra
from .stats.run import PowerMethodReport, power_method_stats

#: Columns of the per-layer table / CSV, in order.
TABLE_COLUMNS = ("layer", "slot", "lambda1", "lambda2", "gap", "relative_gap", "case", "v1v2_overlap", "spectral_radius")


def _fmt_complex(z: Sequence[float]) -> str:
    re, im = z
    return f"{re:.4g}" if im == 0 else f"{re:.4g}{'+' if im >= 0 else '-'}{abs(im):.3g}j"


@dataclasses.dataclass
class AnalysisReport(JsonResult):
    """Everything `analyze` measured. ``layers`` holds one JSON-ready record per analysed layer.

    Speaks the result protocol (:mod:`steerformer.results`). A report read back with :meth:`load`
    has the saved eigenvalues but no eigenvectors or matrices (``spectra`` and ``matrices`` are
    None: recompute them with :func:`analyze`). A spectra-only run of a grouped-query model keeps
    the factors of each F and not F itself (``matrices.matrices`` is None; ``matrices.formed()``).
    """

    meta: dict
    layers: list[dict]
    spectra: Spectra | None
    matrices: LayerMatrices | None
    #: power-method statistics (controlled dynamics, full model, prolonged run); None with stats=False
    power: PowerMethodReport | None = None
    #: (layers, d) complex eigenvalues, ordered as in ``spectra`` (filled from it when not given)
    eigenvalues: np.ndarray | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.eigenvalues is None and self.spectra is not None:
            self.eigenvalues = self.spectra.eigenvalues.numpy()

    @property
    def layer_ids(self) -> list[int]:
        return self.matrices.layer_ids if self.matrices is not None else [r["layer"] for r in self.layers]

    @property
    def slot_ids(self) -> list[int]:
        return self.matrices.slot_ids if self.matrices is not None else [r["slot"] for r in self.layers]

    def summary(self) -> str:
        """The model line and the per-layer table (and the power-method verdict when computed)."""
        cfg = self.meta.get("config", {})
        head = (f"{self.meta.get('model_id', '?')}: {cfg.get('model_type')}, {cfg.get('n_layers')} layers, "
                f"d={cfg.get('d_model')}, {cfg.get('n_heads')} heads")
        lines = [head, self.table()]
        if self.power is not None:
            lines.append(self.power.summary())
        return "\n".join(lines)

    def to_dict(self) -> dict:
        out = {"meta": self.meta, "layers": self.layers}
        if self.power is not None:
            out["power_method"] = self.power.to_dict()
        return out

    def to_csv(self, path: str | Path | None = None) -> str:
        """One row per layer with the table columns (complex numbers split in re/im)."""
        header = [x for c in TABLE_COLUMNS for x in ([f"{c}_re", f"{c}_im"] if c in ("lambda1", "lambda2") else [c])]
        rows = ([x for c in TABLE_COLUMNS for x in (r[c] if c in ("lambda1", "lambda2") else [r[c]])]
                + [r["de_facto_case3"]] for r in self.layers)
        return csv_text(header + ["de_facto_case3"], rows, path)

    def save(self, out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """Write report.json, layers.csv, eigenvalues.npz, the statistics' files (and the figures)
        into ``out_dir``; returns the written paths by role (``json``, ``csv``, ``npz``, then the
        statistics' and the figures' file names)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = {"json": out / "report.json", "csv": out / "layers.csv", "npz": out / "eigenvalues.npz"}
        self.to_json(written["json"])
        self.to_csv(written["csv"])
        np.savez_compressed(written["npz"], layer_ids=np.asarray(self.layer_ids), slot_ids=np.asarray(self.slot_ids),
                            eigenvalues=self.eigenvalues)
        if self.power is not None:
            written.update(self.power.save(out, plots=False))
        if plots:
            written.update({p.name: p for p in self.plot(out)})
        return written

    @classmethod
    def load(cls, out_dir: str | Path) -> "AnalysisReport":
        """The report :meth:`save` wrote into ``out_dir`` (eigenvalues, records, statistics)."""
        out = Path(out_dir)
        doc = read_json(out / "report.json")
        with np.load(out / "eigenvalues.npz") as z:
            eigenvalues = z["eigenvalues"]
        power = PowerMethodReport.load(out, doc["power_method"]) if "power_method" in doc else None
        return cls(meta=doc["meta"], layers=doc["layers"], spectra=None, matrices=None, power=power,
                   eigenvalues=eigenvalues)

    def plot(self, out_dir: str | Path) -> list[Path]:
        """Spectral figures: complex planes per layer, top-5 real parts across layers, Re λ histogram."""
        out = Path(out_dir)
        ev = self.eigenvalues
        name = self.meta.get("model_id", "")
        extra = self.power.plot(out, title=name) if self.power is not None else []
        return extra + [
            plotting.save_figure(plotting.eigenvalue_planes(ev, self.layer_ids, name), out / "eigenvalues_complex_plane.png"),
            plotting.save_figure(plotting.top_real_parts(ev, self.layer_ids, 5, name), out / "top5_real_parts.png"),
            plotting.save_figure(plotting.real_part_histogram(ev, self.layer_ids, name), out / "real_part_histogram.png"),
        ]

    def table(self) -> str:
        """Per-layer text table (λ1, λ2, gap, case, |<v1,v2>|)."""
        lines = [f"{'layer':>5} {'λ1':>18} {'λ2':>18} {'gap':>10} {'rel.gap':>8} {'case':>6} {'|<v1,v2>|':>9}"]
        for r in self.layers:
            case = f"{r['case']}{'*' if r['de_facto_case3'] else ''}"
            lines.append(f"{r['layer']:>5} {_fmt_complex(r['lambda1']):>18} {_fmt_complex(r['lambda2']):>18} "
                         f"{r['gap']:>10.4g} {r['relative_gap']:>8.3g} {case:>6} {r['v1v2_overlap']:>9.3f}")
        if any(r["de_facto_case3"] for r in self.layers):
            lines.append("* de facto case 3: tiny relative gap and nearly parallel v1, v2")
        return "\n".join(lines)


def analyze(model: Any, *, layers: Sequence[int] | None = None, dtype: str | torch.dtype = "float64",
            device: str | None = None, revision: str | None = None, progress: bool = False,
            stats: bool | StatsConfig = True, top_k: int | None | str = "auto", workers: int | None = None,
            **stats_options: Any) -> AnalysisReport:
    """Layer matrices F_k = W_O·V of ``model``, their spectra and (``stats=True``) the
    power-method statistics of :func:`steerformer.stats.power_method_stats`.

    ``dtype`` is the precision of the eigen-decomposition ("float64" default, "float32" faster);
    the matrices are always formed in float64. Shared-weight layers (ALBERT) are decomposed once.
    ``stats``: False for spectra only, True or a :class:`~steerformer.stats.StatsConfig` to run the
    statistics; ``stats_options`` are StatsConfig fields by keyword (``n_prompts=50, prolong=20``).
    The dynamics run in ``dtype`` too.

    ``top_k``: only the K eigenvalues of largest real part per layer (Arnoldi, recorded fallback to
    the full eig); "auto" (default) = full for d ≤ 2048 or with statistics (they need every
    eigenvector), K = 16 above; None or 0 = always full. Layers with r = H_kv·d_h < d get their
    exact nonzero spectrum from an r × r problem (recorded per layer as ``eig_method``).
    ``workers``: processes for the per-layer eig (default: the cores, when d ≥ 512 and there is
    more than one distinct layer; below that, process start-up costs more than it saves).
    """
    config = None
    if stats is not False:
        base = stats if isinstance(stats, StatsConfig) else StatsConfig()
        config = dataclasses.replace(base, **stats_options)  # checks the options before any work
    elif stats_options:
        raise bad_argument("stats", False, "True or a StatsConfig when statistics options are given "
                           f"({', '.join(sorted(stats_options))})")
    tdtype = torch_dtype(dtype, choices=EIG_DTYPES)
    dev = resolve_device(device)  # cheap checks before any weight is read; the one check of the run

    auto_top_k = top_k == "auto" and config is None
    if top_k == "auto":
        top_k = None
    elif top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0):
        raise bad_argument("top_k", top_k, "a non-negative integer, 'auto' or None")
    elif top_k is not None and top_k > 0 and config is not None:
        raise bad_argument("top_k", top_k, "None (the statistics need every eigenvector)",
                           "Use --spectra-only with --top-k, or drop --top-k.")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise bad_argument("workers", workers, "an integer ≥ 1")
    source = as_source(model, revision=revision)
    if config is not None and source.adapter.d_model < 2:  # from the config: before any weight is read
        raise bad_argument("model", f"d_model={source.adapter.d_model}", "a model with d_model >= 2 for the "
                           "statistics (they measure a plane of the residual stream: two orthonormal directions)",
                           "Run with --spectra-only (the eigenvalues alone) for this model.")
    # Spectra only: grouped-query layers keep their factors and F is never formed (r × r problems).
    mats = layer_matrices(source, layers, form=config is not None)
    d = mats.d_model
    if auto_top_k and d > FULL_UP_TO:
        top_k = DEFAULT_TOP_K
    top_k = top_k or None  # 0 → full
    if top_k is not None and top_k > d - 2:
        top_k = None  # Arnoldi needs k ≤ d − 2: the full spectrum is all there is
    n_distinct = len(set(mats.slot_ids))
    if workers is None:
        workers = default_workers() if d >= 512 and n_distinct > 1 else 1
    sp = spectra(mats, dtype=tdtype, device=dev, progress=progress and "eig per layer", top_k=top_k, workers=workers)
    records = [{"layer": k, "slot": s, **sp.record(i)} for i, (k, s) in enumerate(zip(mats.layer_ids, mats.slot_ids))]
    meta = {
        **source.meta(),
        VERSION_KEY: __version__,
        "eig_dtype": str(tdtype).replace("torch.", ""),
        # to_dict(): reading config.torch_dtype directly warns on transformers 5 (renamed dtype).
        "checkpoint_dtype": str(source.config.to_dict().get("dtype") or source.config.to_dict().get("torch_dtype")),
        "device": device or "cpu",
        "config": source.adapter.config_summary(),
        "layers_analyzed": mats.layer_ids,
        "eig": {"cpu_backend": CPU_BACKEND[tdtype], "top_k": top_k, "workers": workers,
                "methods": sorted(set(sp.method))},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    power = None
    if config is not None:
        power = power_method_stats(source, config, matrices=mats, spectra=sp, dtype=tdtype, device=dev,
                                   progress=progress)
    return AnalysisReport(meta=meta, layers=records, spectra=sp, matrices=mats, power=power)
