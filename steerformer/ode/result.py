"""The result of a named setup: data that serializes to JSON (+ NPZ) and draws its own figures."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field

import numpy as np

from ..version import __version__
from ..results import VERSION_KEY, JsonResult, read_json, to_jsonable
from .plots import FIGURES, plot_bridge

#: Prefix of the series arrays in the NPZ (the token trajectories keep their own names).
_SERIES = "series__"


#: Significant digits of the floats that :meth:`SetupResult.summary` prints: a time of 121 steps
#: of 0.05 reads 6.05, not 6.050000000000001.
SUMMARY_DIGITS = 6


def _short(value: object) -> str:
    """JSON-like text of plain data with every float rounded to :data:`SUMMARY_DIGITS` digits."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:.{SUMMARY_DIGITS}g}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_short(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


@dataclass
class SetupResult(JsonResult):
    """Output of one named setup (see :data:`steerformer.ode.SETUPS`); speaks the result protocol
    (:mod:`steerformer.results`).

    ``times``: the saved times (continuous setups) or step indices (discrete maps).
    ``series``: name → array whose first axis follows ``times`` (e.g. ``"E"`` of shape
    (T, runs)); written to JSON. ``trajectory``: saved tokens (T, runs, n, d) when small enough
    to keep (the 3-D views); written only to the NPZ. ``findings``: the scalar findings (the
    ``"summary"`` entry of the JSON; :meth:`summary` prints them).
    """

    setup: str
    description: str
    config: dict
    times: np.ndarray
    series: dict[str, np.ndarray] = field(default_factory=dict)
    findings: dict[str, object] = field(default_factory=dict)
    trajectory: dict[str, np.ndarray] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    def summary(self) -> str:
        """The setup and its description, then one ``key: value`` line per finding, floats to
        :data:`SUMMARY_DIGITS` significant digits (the JSON keeps them whole)."""
        lines = [f"{self.setup}: {self.description}"]
        lines += [f"  {k}: {_short(to_jsonable(v))}" for k, v in self.findings.items()]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return to_jsonable({"setup": self.setup, "description": self.description, VERSION_KEY: __version__,
                            "config": self.config, "summary": self.findings, "times": self.times, "series": self.series,
                            "extra": self.extra})

    def save(self, out_dir: str | pathlib.Path, *, plots: bool = True) -> dict[str, pathlib.Path]:
        """``result.json``, ``result.npz`` (times, series and token trajectories, exact) and the
        figures in folder ``out_dir``; returns the paths by role (figures by file name)."""
        out = pathlib.Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = {"json": out / "result.json", "npz": out / "result.npz"}
        self.to_json(written["json"])
        np.savez_compressed(written["npz"], times=self.times, **self.trajectory,
                            **{_SERIES + k: np.asarray(v) for k, v in self.series.items()})
        if plots:
            written.update({p.name: p for p in self.plot(out)})
        return written

    @classmethod
    def load(cls, out_dir: str | pathlib.Path) -> "SetupResult":
        """The result :meth:`save` wrote into ``out_dir``."""
        out = pathlib.Path(out_dir)
        doc = read_json(out / "result.json")
        with np.load(out / "result.npz") as z:
            arrays = {k: z[k] for k in z.files}
        series = {k[len(_SERIES):]: v for k, v in arrays.items() if k.startswith(_SERIES)}
        trajectory = {k: v for k, v in arrays.items() if not k.startswith(_SERIES) and k != "times"}
        return cls(doc["setup"], doc["description"], doc["config"], arrays["times"], series, doc["summary"],
                   trajectory, doc["extra"])

    def plot(self, out_dir: str | pathlib.Path) -> list[pathlib.Path]:
        """Draw this setup's figures (PNG) into ``out_dir``; returns their paths."""
        out = pathlib.Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        return FIGURES.get(self.setup, plot_bridge)(self, out)
