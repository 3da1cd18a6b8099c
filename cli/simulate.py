"""`steerformer simulate SETUP` and `steerformer simulate list`: the papers' ODE/map simulations."""

from __future__ import annotations

import json
import pathlib
from typing import Optional

import typer

from steerformer_cli._common import check_cheap_options, user_errors
from steerformer_cli.main import app


def _layer_matrix(model: str, layer: int):
    """F of one layer of a checkpoint, through the adapters (imported only when asked for)."""
    from steerformer.errors import bad_argument

    try:
        from steerformer import layer_matrices
    except ImportError as exc:
        raise bad_argument("--model", model, "a steerformer build that provides steerformer.layer_matrices",
                           "The model adapters are not installed in this build; run without --model.") from exc
    mats = layer_matrices(model).matrices
    if not -mats.shape[0] <= layer < mats.shape[0]:
        raise bad_argument("--layer", layer, f"a layer index in [0, {mats.shape[0]})")
    return mats[layer]


@app.command("simulate")
def simulate(
    setup: str = typer.Argument(..., help="Setup name (see `steerformer simulate list`), or `list`."),
    runs: Optional[int] = typer.Option(None, "--runs", help="Independent runs (batched); default: the paper's."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random draw."),
    t1: Optional[float] = typer.Option(None, "--t1", help="Final time (continuous) or number of layers (maps)."),
    dt: Optional[float] = typer.Option(None, "--dt", help="Fixed RK4 step (continuous; default adaptive DOP853) or τ (maps)."),
    out: Optional[pathlib.Path] = typer.Option(None, "--out", help="Folder for result.json, result.npz and PNG figures."),
    model: Optional[str] = typer.Option(None, "--model", help="bridge only: checkpoint id/path whose layer matrix F drives the map."),
    layer: int = typer.Option(-1, "--layer", help="bridge only: which layer's F (default last)."),
    progress: bool = typer.Option(False, "--progress", help="Show a progress bar (continuous setups)."),
) -> None:
    """Run one of the papers' simulations and write its JSON summary and figures."""
    from steerformer.ode import SETUPS, run_setup

    if setup == "list":
        for spec in SETUPS.values():
            typer.echo(f"{spec.name:8s} {spec.kind:10s} {spec.summary}")
        return
    with user_errors():
        check_cheap_options(out=out, kind="simulate", overwrite=True, inputs=[model])
        kwargs: dict = {"runs": runs, "seed": seed, "t1": t1, "dt": dt}
        if setup in SETUPS and SETUPS[setup].kind == "continuous":
            kwargs["progress"] = progress
        if model is not None:
            if setup != "bridge":
                from steerformer.errors import bad_argument

                raise bad_argument("--model", model, "used with the `bridge` setup only")
            kwargs["F"] = _layer_matrix(model, layer)
        result = run_setup(setup, **kwargs)
        typer.echo(f"{result.setup}: {result.description}")
        for key, value in result.summary.items():
            typer.echo(f"  {key}: {json.dumps(value, default=str)}")
        if out is not None:
            from steerformer.outputs import SIMULATE, write_atomically

            paths: list = []
            write_atomically(out, lambda tmp: (result.to_json(tmp / "result.json"), paths.extend(result.plot(tmp))),
                             overwrite=True, kind=SIMULATE, name="--out")
            typer.echo(f"wrote {out / 'result.json'} and {len(paths)} figure(s) to {out}")
