"""`steerformer simulate SETUP` and `steerformer simulate list`: the papers' ODE/map simulations."""

from __future__ import annotations

import math
import pathlib
from typing import Optional

import typer

from steerformer.errors import bad_argument
from steerformer.outputs import SIMULATE, write_atomically
from steerformer_cli._common import MODEL_HELP, check_cheap_options, user_errors
from steerformer_cli.app import app


def _layer_matrix(model: str, layer: int):
    """F of one layer of a checkpoint, through the adapters (imported only when asked for)."""
    from steerformer import layer_matrices

    mats = layer_matrices(model).matrices
    if not -mats.shape[0] <= layer < mats.shape[0]:
        raise bad_argument("--layer", layer, f"a layer index in [0, {mats.shape[0]})")
    return mats[layer]


#: Above this many runs, one run is simulated first to estimate the memory of the whole batch.
_PROBE_RUNS = 1000


def _check_numbers(setup: str, runs, t1, dt, seed: int) -> None:
    """--t1 / --dt finite and positive; a huge --runs refused with a memory estimate."""
    for name, v in (("--t1", t1), ("--dt", dt)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise bad_argument(name, v, "a finite positive number")
    if runs is not None and runs > _PROBE_RUNS:
        from steerformer.ode import run_setup
        from steerformer.resources import check_fits

        one = run_setup(setup, runs=1, seed=seed, t1=t1, dt=dt)  # the same run, once
        cfg = one.config
        tokens = int(cfg.get("n") or (cfg.get("n1", 0) + cfg.get("n2", 0)) or 1)
        need = runs * tokens * int(cfg.get("d", 1)) * max(len(one.times), 1) * 8 * 2  # states + derived series
        check_fits(need, "--runs", runs, f"{runs:,} runs of {tokens} tokens × {len(one.times)} time points")


@app.command("simulate")
def simulate(
    setup: str = typer.Argument(..., help="Setup name (see `steerformer simulate list`), or `list`."),
    runs: Optional[int] = typer.Option(None, "--runs", help="Independent runs (batched); default: the paper's."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    t1: Optional[float] = typer.Option(None, "--t1", help="Final time (continuous) or number of layers (maps)."),
    dt: Optional[float] = typer.Option(None, "--dt", help="Fixed RK4 step (continuous; default adaptive DOP853) or τ (maps)."),
    out: Optional[pathlib.Path] = typer.Option(None, "--out", help="Folder for result.json, result.npz and PNG figures."),
    model: Optional[str] = typer.Option(None, "--model", help="bridge only: the model whose layer matrix F drives the map. " + MODEL_HELP),
    layer: int = typer.Option(-1, "--layer", help="bridge only: which layer's F (default last)."),
    progress: bool = typer.Option(False, "--progress", help="Show a progress bar (continuous setups)."),
) -> None:
    """Run one of the papers' simulations and write its JSON summary and figures.

    Example: steerformer simulate fig13a --out runs/fig13a
    """
    from steerformer.ode import SETUPS, run_setup

    if setup == "list":
        for spec in SETUPS.values():
            typer.echo(f"{spec.name:8s} {spec.kind:10s} {spec.summary}")
        return
    with user_errors():
        check_cheap_options(out=out, kind="simulate", overwrite=True, inputs=[model])
        if setup in SETUPS:
            _check_numbers(setup, runs, t1, dt, seed)
        kwargs: dict = {"runs": runs, "seed": seed, "t1": t1, "dt": dt}
        if setup in SETUPS and SETUPS[setup].kind == "continuous":
            kwargs["progress"] = progress
        if model is not None:
            if setup != "bridge":
                raise bad_argument("--model", model, "used with the `bridge` setup only")
            kwargs["F"] = _layer_matrix(model, layer)
        result = run_setup(setup, **kwargs)
        typer.echo(result.summary())
        if out is not None:
            written: dict = {}
            write_atomically(out, lambda tmp: written.update(result.save(tmp)), overwrite=True, kind=SIMULATE,
                             name="--out")
            n_figures = sum(p.suffix == ".png" for p in written.values())
            typer.echo(f"wrote {out / 'result.json'} and {n_figures} figure(s) to {out}")
