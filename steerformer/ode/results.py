"""The result of a named setup: data that serializes to JSON (+ NPZ) and draws its own figures."""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass, field

import numpy as np

from steerformer import __version__


def _jsonable(x: object) -> object:
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None  # JSON has no NaN/inf
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


@dataclass
class SetupResult:
    """Output of one named setup (see :data:`steerformer.ode.SETUPS`).

    ``times``: the saved times (continuous setups) or step indices (discrete maps).
    ``series``: name → array whose first axis follows ``times`` (e.g. ``"E"`` of shape
    (T, runs)); written to JSON. ``trajectory``: saved tokens (T, runs, n, d) when small enough
    to keep (the 3-D views); written only to the NPZ. ``summary``: the scalar findings.
    """

    setup: str
    description: str
    config: dict
    times: np.ndarray
    series: dict[str, np.ndarray] = field(default_factory=dict)
    summary: dict[str, object] = field(default_factory=dict)
    trajectory: dict[str, np.ndarray] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _jsonable({
            "setup": self.setup,
            "description": self.description,
            "steerformer_version": __version__,
            "config": self.config,
            "summary": self.summary,
            "times": self.times,
            "series": self.series,
            "extra": self.extra,
        })

    def to_json(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write config, summary and series as JSON; the token trajectories go to a sibling .npz."""
        p = pathlib.Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=1))
        if self.trajectory:
            np.savez_compressed(p.with_suffix(".npz"), times=self.times, **self.trajectory)
        return p

    def plot(self, out_dir: str | pathlib.Path) -> list[pathlib.Path]:
        """Draw this setup's figures (PNG) into ``out_dir``; returns their paths."""
        from steerformer.ode import plots

        out = pathlib.Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        return plots.draw(self, out)


__all__ = ["SetupResult"]
