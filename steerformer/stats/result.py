"""The result of :func:`alignment_stats`: JSON / CSV / NPZ and the paper-style figures."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from .._text import csv_text
from ..results import JsonResult, read_json

import numpy as np

#: Per-step columns of the CSV and of every JSON layer record, in order (the schema tests pin it).
COLUMNS = (
    "step", "layer", "case", "de_facto_case3", "lambda1_complex", "subspace",
    "rho_mean", "rho_std", "rho_before_mean", "rho_before_std", "delta_rho_mean", "delta_rho_std", "P",
    "rho_re_v1_mean", "rho_re_v1_std", "rho_S_mean", "rho_S_std", "subspace_dim", "rho_S_chance",
    "baseline_rho_mean", "baseline_rho_std", "baseline_delta_mean", "baseline_delta_std", "baseline_P",
    "baseline1d_rho_mean", "baseline1d_rho_std", "baseline1d_delta_mean", "baseline1d_delta_std", "baseline1d_P",
    "n_real_directions", "n_pair_directions", "numerical_rank",
    "cumulative_rho_mean", "cumulative_rho_std", "cumulative_complex",
    "distance_mean", "distance_max", "power_method_step",
)
#: Columns with a confidence interval, ``<name>_lo`` and ``<name>_hi`` (docs/math.md §4c; absent with ci=0).
CI_COLUMNS = ("rho_mean", "rho_before_mean", "delta_rho_mean", "P", "rho_re_v1_mean", "rho_S_mean",
              "baseline_rho_mean", "baseline_delta_mean", "baseline_P",
              "baseline1d_rho_mean", "baseline1d_delta_mean", "baseline1d_P", "cumulative_rho_mean")
COLUMNS += tuple(f"{c}_{end}" for c in CI_COLUMNS for end in ("lo", "hi"))
#: The test (docs/math.md §4c): K random draws of W_Q, W_K, W_V, W_O (absent with null_draws=0) — the
#: null's mean, std and central interval of Δρ and P, the p-values, adjusted across layers, and the
#: verdict; then how often the verdicts hold over token seeds (with seeds > 1).
COLUMNS += (
    "null_delta_mean", "null_delta_std", "null_delta_lo", "null_delta_hi",
    "null_P_mean", "null_P_std", "null_P_lo", "null_P_hi",
    "p_delta", "p_P", "p_delta_adjusted", "p_P_adjusted", "beyond_chance",
    "power_method_step_share", "beyond_chance_share", "unstable",
)


def histogram(values: np.ndarray, bins: int) -> dict:
    counts, edges = np.histogram(np.clip(values, 0.0, 1.0), bins=bins, range=(0.0, 1.0))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def _clean(v):
    """JSON has no NaN: write null."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


@dataclasses.dataclass
class AlignmentStats(JsonResult):
    """Per-step power-method statistics of one trajectory.

    ``layers[k]`` is the record of step k (keys :data:`COLUMNS`; the cumulative ones only when the
    cumulative product was computed). ``per_token[name]`` is (steps, N): the per-token values behind
    the means (``rho_before``, ``rho``, ``rho_re_v1``, ``rho_S``, ``rho_cumulative``).
    """

    meta: dict
    layers: list[dict]
    per_token: dict[str, np.ndarray]
    histograms: dict
    lengths: list[int]

    # ---- summaries ---------------------------------------------------------------------------
    @property
    def n_power_steps(self) -> int:
        return sum(r["power_method_step"] for r in self.layers)

    def summary(self) -> str:
        """"22 of 24 layers act as a power-method step (Δρ>0, Δρ>Δρ̄, P>P̄)", with the test's and
        the seeds' verdicts when computed."""
        n = len(self.layers)
        unit = "steps" if self.meta.get("options", {}).get("repeat", 1) > 1 else "layers"
        out = f"{self.n_power_steps} of {n} {unit} act as a power-method step"
        test = self.meta.get("test")
        if not test:
            return out + " (Δρ > 0, Δρ > Δρ̄, P > P̄)"
        beyond = [r["layer"] for r in self.layers if r.get("beyond_chance")]
        name = {"bh": "Benjamini–Hochberg", "holm": "Holm"}[test["correction"]]
        out += (f"; {len(beyond)} of them beyond chance ({name}-adjusted p < {test['alpha']:g} for Δρ and P against "
                f"{test['draws']} random-weight draws)")
        stab = self.meta.get("stability")
        if stab:
            k = len(stab["seeds"])
            unstable = [r["layer"] for r in self.layers if r.get("unstable")]
            stable = [b for b in beyond if b not in unstable]
            out += (f"; over token seeds {stab['seeds'][0]}–{stab['seeds'][-1]}, beyond chance in ≥ "
                    f"{stab['stable_share']:.0%} of the {k}: {stable or 'none'}, unstable: {unstable or 'none'}")
        return out

    def verdict_lines(self) -> list[str]:
        """One line per step saying whether it acts as a power-method step, and why not."""
        out = []
        for r in self.layers:
            why = []
            if not r["delta_rho_mean"] > 0:
                why.append("Δρ ≤ 0")
            if not r["delta_rho_mean"] > r["baseline_delta_mean"]:
                why.append("Δρ ≤ Δρ̄")
            if not r["P"] > r["baseline_P"]:
                why.append("P ≤ P̄")
            verdict = "power-method step" if r["power_method_step"] else "not a power-method step (" + ", ".join(why) + ")"
            if "beyond_chance" in r:
                verdict += (f"; null Δρ {r['null_delta_mean']:+.4f}, P {r['null_P_mean']:.2f}; adjusted p "
                            f"{r['p_delta_adjusted']:.3g} (Δρ), {r['p_P_adjusted']:.3g} (P) → "
                            + ("beyond chance" if r["beyond_chance"] else "not beyond chance"))
            if "beyond_chance_share" in r:
                k = len(self.meta["stability"]["seeds"])
                verdict += (f" (beyond chance in {round(r['beyond_chance_share'] * k)} of {k} seeds"
                            + (": unstable)" if r.get("unstable") else ")"))
            ci = (lambda c: f" [{r[c + '_lo']:+.4f}, {r[c + '_hi']:+.4f}]" if c + "_lo" in r else "")  # noqa: E731
            out.append(f"layer {r['layer']:>3}: ρ={r['rho_mean']:.3f} Δρ={r['delta_rho_mean']:+.4f}{ci('delta_rho_mean')} "
                       f"(Δρ̄={r['baseline_delta_mean']:+.4f}) P={r['P']:.2f} (P̄={r['baseline_P']:.2f}) → {verdict}")
        return out

    # ---- serialization -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "meta": self.meta, "summary": self.summary(),
            "layers": [{c: _clean(r[c]) for c in COLUMNS if c in r} for r in self.layers],
            "histograms_last_layer": self.histograms,
        }

    def to_csv(self, path: str | Path | None = None) -> str:
        """One row per step, columns :data:`COLUMNS` (empty cell where not computed)."""
        return csv_text(COLUMNS, ([r.get(c, "") for c in COLUMNS] for r in self.layers), path)

    def to_npz(self, path: str | Path) -> None:
        np.savez_compressed(path, lengths=np.asarray(self.lengths),
                            layer_ids=np.asarray([r["layer"] for r in self.layers]), **self.per_token)

    def save(self, out_dir: str | Path, *, prefix: str = "alignment", plots: bool = True) -> dict[str, Path]:
        """``<prefix>.json``, ``<prefix>.csv``, ``<prefix>_tokens.npz`` (and the figures) in
        ``out_dir``; returns the paths by role (``json``, ``csv``, ``npz``, then figure file names)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / f"{prefix}.json", "csv": out / f"{prefix}.csv", "npz": out / f"{prefix}_tokens.npz"}
        self.to_json(paths["json"])
        self.to_csv(paths["csv"])
        self.to_npz(paths["npz"])
        if plots:
            paths.update({p.name: p for p in self.plot(out, prefix=prefix)})
        return paths

    @classmethod
    def load(cls, out_dir: str | Path, *, prefix: str = "alignment") -> "AlignmentStats":
        """The statistics :meth:`save` wrote into ``out_dir`` (``null`` read back as NaN)."""
        out = Path(out_dir)
        return cls.from_dict(read_json(out / f"{prefix}.json"), out / f"{prefix}_tokens.npz")

    @classmethod
    def from_dict(cls, doc: dict, npz: str | Path) -> "AlignmentStats":
        """Rebuild from :meth:`to_dict` data and the per-token arrays of :meth:`to_npz`."""
        with np.load(npz) as z:
            arrays = {k: z[k] for k in z.files}
        lengths = [int(n) for n in arrays.pop("lengths")]
        arrays.pop("layer_ids", None)
        layers = [{c: (float("nan") if v is None else v) for c, v in r.items()} for r in doc["layers"]]
        return cls(meta=doc["meta"], layers=layers, per_token=arrays, histograms=doc["histograms_last_layer"],
                   lengths=lengths)

    def plot(self, out_dir: str | Path, *, prefix: str = "alignment", title: str = "") -> list[Path]:
        """Fig. 2(b)/7 rows, Fig. 8 cumulative, Fig. 2(a)(b) histograms (and Fig. 6(a)(b) trajectories)."""
        from . import plots

        out = Path(out_dir)
        figs = {
            f"{prefix}_power_method.png": plots.power_method_rows([self], [self.meta.get("variant", "")], title),
            f"{prefix}_histograms.png": plots.last_layer_histograms(self, title),
            f"{prefix}_trajectories.png": plots.token_trajectories(self, title),
        }
        if self.meta.get("cumulative"):
            figs[f"{prefix}_cumulative.png"] = plots.cumulative(self, title)
        return [plots.save_figure(fig, out / name) for name, fig in figs.items()]
