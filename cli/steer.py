"""`steerformer steer | unsteer | verify`: rank-1 steering from the command line (thin)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from steerformer_cli._common import check_cheap_options, user_errors
from steerformer_cli.main import app


class Measure(str, Enum):
    """Where the target alignment is measured (``--measure``)."""

    model = "model"
    dynamics = "dynamics"


class Solve(str, Enum):
    """How wᵀV⁺ is obtained (``--solve``)."""

    min_norm = "min-norm"
    exact = "exact"


@app.command("steer")
def steer_cmd(
    model: str = typer.Argument(..., help="Checkpoint folder, Hub id, or 'minilm' (the bundled MiniLM)."),
    direction: Optional[Path] = typer.Option(None, "--direction", help="A .npy vector of d_model entries."),
    token: Optional[str] = typer.Option(None, "--token", help="Steer toward this token's (un)embedding row."),
    eigvec: Optional[int] = typer.Option(None, "--eigvec", help="Steer toward eigenvector K of F_layer (by real part)."),
    text: Optional[str] = typer.Option(None, "--text", help="Steer toward the mean final hidden state of this text."),
    strength: Optional[float] = typer.Option(None, "--strength", help="gain = strength x |lambda1(F_layer)|."),
    gain: Optional[float] = typer.Option(None, "--gain", help="Absolute gain (instead of --strength)."),
    target_alignment: float = typer.Option(0.99, "--target-alignment", help="Choose the smallest gain reaching this."),
    measure: Measure = typer.Option(Measure.model, "--measure", help="Where the target is measured."),
    solve: Solve = typer.Option(Solve.min_norm, "--solve", help="How wᵀV⁺ is obtained."),
    layer: int = typer.Option(-1, "--layer", help="Execution layer to edit (negative counts from the end)."),
    through_ffn: bool = typer.Option(False, "--through-ffn", help="Pre-compensate the FFN (align final states)."),
    untie_last: bool = typer.Option(False, "--untie-last", help="ALBERT: give the last layer its own weights."),
    out: Optional[Path] = typer.Option(None, "--out", help="Save the steered checkpoint here."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
    push_to_hub: Optional[str] = typer.Option(None, "--push-to-hub", help="Upload the saved folder to this repo id."),
    private: bool = typer.Option(False, "--private", help="Create the Hub repo as private."),
    record_json: Optional[Path] = typer.Option(None, "--record", help="Also write the record JSON here."),
    device: Optional[str] = typer.Option(None, "--device", help="Load and edit the model on this device (cpu, cuda, cuda:1)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Load the model in this dtype (fp32, fp16, bf16; default: stored)."),
    compensate_bias: bool = typer.Option(False, "--compensate-bias", help="Remove the edit's bias shift through b_O."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars on stderr."),
) -> None:
    """Edit one attention layer's output weight so tokens align with a direction; print the cost.

    Example: steerformer steer minilm --token the --strength 2 --out runs/minilm-steered
    """
    from steerformer.steering import load_for_steering, save_steered, steer
    from steerformer.steering import push_to_hub as push

    with user_errors():
        if push_to_hub is not None and out is None:
            raise typer.BadParameter("--push-to-hub uploads the --out folder: give --out too")
        check_cheap_options(out=out, record=record_json, kind="steer", overwrite=overwrite, inputs=[model])
        dev, dt = _device_dtype(device, dtype)  # cheap checks before loading
        m = load_for_steering(model, dtype=dt, device=dev)
        rec = steer(m, str(direction) if direction is not None else None, token=token, eigvec=eigvec, text=text,
                    strength=strength, gain=gain, target_alignment=target_alignment, measure=measure.value, solve=solve.value,
                    layer=layer, through_ffn=through_ffn, untie_last=untie_last, compensate_bias=compensate_bias,
                    progress=not quiet)
        typer.echo(rec.summary())
        if record_json is not None:
            rec.to_json(record_json)
        if out is not None:
            path = save_steered(m, out, overwrite=overwrite)
            typer.echo(f"saved to {path}")
            if push_to_hub is not None:
                typer.echo(f"pushed: {push(path, push_to_hub, private=private)}")


def _device_dtype(device: Optional[str], dtype: Optional[str]):
    """(device, torch dtype) from --device / --dtype, checked before anything is loaded."""
    import torch
    from steerformer.collapse.run import DTYPES
    from steerformer.errors import bad_argument

    dt = None
    if dtype is not None:
        key = dtype.lower().removeprefix("torch.")
        if key not in DTYPES:
            raise bad_argument("--dtype", dtype, f"one of {', '.join(sorted(DTYPES))}")
        dt = DTYPES[key]
    if device is not None:
        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError):
            raise bad_argument("--device", device, "a torch device such as cpu, cuda or cuda:1") from None
        if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
            raise bad_argument("--device", device, "an available device", "This torch build or machine has no such "
                               "CUDA device; use --device cpu.")
        if dev.type == "mps" and not torch.backends.mps.is_available():
            raise bad_argument("--device", device, "an available device", "MPS is not available here; use --device cpu.")
    return device, dt


@app.command("unsteer")
def unsteer_cmd(
    directory: Path = typer.Argument(..., help="A checkpoint written by `steerformer steer --out`."),
    out: Path = typer.Option(..., "--out", help="Where to write the restored original model."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
    last: Optional[int] = typer.Option(None, "--last", help="Remove only the last K steering calls (default: all)."),
) -> None:
    """Restore the original weights (bit-identical) from a steered checkpoint alone.

    Example: steerformer unsteer runs/minilm-steered --out runs/minilm-restored
    """
    from steerformer.steering import unsteer_checkpoint

    with user_errors():
        if last is not None and last < 1:
            from steerformer.errors import bad_argument

            raise bad_argument("--last", last, "a whole number >= 1 (steering calls to remove)")
        check_cheap_options(out=out, kind="unsteer", overwrite=overwrite, inputs=[directory])
        path = unsteer_checkpoint(directory, out, overwrite=overwrite, last=last)
        typer.echo(f"removed the last {last} steering call(s): {path}" if last is not None
                   else f"restored original model to {path}")


@app.command("verify")
def verify_cmd(
    directory: Path = typer.Argument(..., help="A checkpoint written by `steerformer steer --out`."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
) -> None:
    """Check the recorded hashes and recompute the alignment of a steered checkpoint.

    Example: steerformer verify runs/minilm-steered --json
    """
    from steerformer.steering import verify_checkpoint

    with user_errors():
        res = verify_checkpoint(directory)
        if as_json:
            typer.echo(json.dumps(res, indent=1))
        else:
            for c in res["checks"]:
                typer.echo(f"{'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}")
        if not res["ok"]:
            raise typer.Exit(code=1)
