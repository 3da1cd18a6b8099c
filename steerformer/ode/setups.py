"""Registry of the named setups: ``SETUPS[name]`` and :func:`run_setup`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pathlib

from ..errors import bad_argument
from . import experiments as ex
from . import plots
from .bridge import layer_matrix_dynamics, random_layer_matrix
from .result import SetupResult


def setup_bridge(*, runs: int = 100, seed: int = 0, t1: float = 50, dt: float | None = None,
                 F: object | None = None, P: object | None = None, heads: int = 1,
                 n_tokens: int = 10, **_: object) -> SetupResult:
    """Map (3) driven by a layer matrix F (default: a seeded random spiked 64×64 stand-in)."""
    F = random_layer_matrix(64, seed=seed) if F is None else F
    return layer_matrix_dynamics(F, P=P, heads=heads, n_tokens=n_tokens, runs=runs, steps=int(t1),
                                 tau=1.0 if dt is None else float(dt), seed=seed)


@dataclass(frozen=True)
class SetupSpec:
    name: str
    run: Callable[..., SetupResult]
    kind: str  # "continuous" (t1 = time, dt = RK4 step) or "discrete" (t1 = steps, dt = τ)
    summary: str
    defaults: dict

    @property
    def draw(self) -> Callable[[SetupResult, pathlib.Path], list[pathlib.Path]]:
        """Draws the figures of a result of this setup into a folder; returns their paths."""
        return plots.FIGURES.get(self.name, plots.plot_bridge)


#: The papers' named simulations (``steerformer simulate NAME``), by name.
SETUPS: dict[str, SetupSpec] = {
    s.name: s
    for s in [
        SetupSpec("5.1.1", ex.setup_5_1_1, "continuous",
                  "Thm 3.2: 10 tokens on S², 2 heads, full attention, P(t) = D(t)P'; tokens, ||P(t)||_F, V(t)",
                  {"runs": 1, "t1": 10.0}),
        SetupSpec("5.1.2", ex.setup_5_1_2, "continuous",
                  "Thm 4.2: causal, 50 tokens on S^499, 2 heads; E for 100 runs (long: thousands of batched evaluations)",
                  {"runs": 100, "t1": 200.0}),
        SetupSpec("5.1.3", ex.setup_5_1_3, "continuous",
                  "Thm 4.5: causal, 1 head, symmetric U; tokens → v; V1, V2",
                  {"runs": 1, "t1": 60.0}),
        SetupSpec("fig13a", ex.setup_fig13a, "discrete",
                  "App. D Fig 13(a): single- vs 5-head map, consensus at v1 (d = 3, 10 tokens)",
                  {"runs": 1, "t1": 60, "tau": 1.0}),
        SetupSpec("fig13b", ex.setup_fig13b, "discrete",
                  "App. D Fig 13(b): stable bipartite point; small perturbation returns, larger escapes",
                  {"runs": 1, "t1": 1500, "tau": 0.9}),
        SetupSpec("bridge", setup_bridge, "discrete",
                  "Map (3) driven by a layer matrix F (--model: a checkpoint's layer); E and ρ(x, v1)",
                  {"runs": 100, "t1": 50, "tau": 1.0}),
    ]
}


def run_setup(name: str, **kwargs: object) -> SetupResult:
    """Run the named setup; keyword arguments override its defaults (runs, seed, t1, dt, …)."""
    if name not in SETUPS:
        raise bad_argument("setup", name, f"one of {sorted(SETUPS)}", "List them with `steerformer simulate list`.")
    return SETUPS[name].run(**{k: v for k, v in kwargs.items() if v is not None})
