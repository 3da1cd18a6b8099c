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


class Mode(str, Enum):
    """What the edit does (``--mode``)."""

    steer = "steer"
    ablate = "ablate"


class OutFormat(str, Enum):
    """What ``--out`` holds (``--format``)."""

    checkpoint = "checkpoint"
    peft = "peft"


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
    positive: Optional[Path] = typer.Option(None, "--positive", help="Contrastive: a text file of positive prompts (one per line)."),
    negative: Optional[Path] = typer.Option(None, "--negative", help="Contrastive: a text file of negative prompts (one per line)."),
    pairs: Optional[Path] = typer.Option(None, "--pairs", help='Contrastive: a JSONL file of {"positive": ..., "negative": ...} lines.'),
    contrastive_method: str = typer.Option("mean-diff", "--contrastive-method", help="Contrastive direction: mean-diff | pca."),
    strength: Optional[float] = typer.Option(None, "--strength", help="gain = strength x |lambda1(F_layer)|."),
    gain: Optional[float] = typer.Option(None, "--gain", help="Absolute gain (instead of --strength)."),
    target_alignment: float = typer.Option(0.99, "--target-alignment", help="Choose the smallest gain reaching this."),
    measure: Measure = typer.Option(Measure.model, "--measure", help="Where the target is measured."),
    solve: Solve = typer.Option(Solve.min_norm, "--solve", help="How wᵀV⁺ is obtained."),
    layer: int = typer.Option(-1, "--layer", help="Execution layer to edit (negative counts from the end)."),
    mode: Mode = typer.Option(Mode.steer, "--mode", help="steer (toward u; a negative --gain/--strength steers away) "
                             "| ablate (remove u from the writes of --ablate-layers)."),
    ablate_layers: Optional[str] = typer.Option(None, "--ablate-layers", help="--mode ablate: layers such as "
                                                "'0,2,5-7' (default all)."),
    ablate_scale: float = typer.Option(1.0, "--ablate-scale", help="--mode ablate: W_O' = (I - s uu^T) W_O, s in (0, 1]."),
    through_ffn: bool = typer.Option(False, "--through-ffn", help="Pre-compensate the FFN (align final states)."),
    untie_last: bool = typer.Option(False, "--untie-last", help="ALBERT: give the last layer its own weights."),
    lazy: bool = typer.Option(False, "--lazy", help="Edit the checkpoint on disk without loading the model "
                              "(needs --solve exact, --gain/--strength, --direction/--eigvec and --out)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Save the steered checkpoint here."),
    out_format: OutFormat = typer.Option(OutFormat.checkpoint, "--format", help="What --out holds: checkpoint (the steered model) "
                                   "| peft (the edits as a LoRA adapter)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
    push_to_hub: Optional[str] = typer.Option(None, "--push-to-hub", help="Upload the saved folder to this repo id."),
    private: bool = typer.Option(False, "--private", help="Create the Hub repo as private."),
    revision: Optional[str] = typer.Option(None, "--hub-revision", help="Push to this branch (created when missing)."),
    create_pr: bool = typer.Option(False, "--create-pr", help="Open a pull request instead of committing."),
    hub_timeout: float = typer.Option(30.0, "--hub-timeout", help="Seconds each Hub request may wait for an answer."),
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
        if lazy:
            from steerformer.steering.lazy import steer_checkpoint

            if out is None:
                raise typer.BadParameter("--lazy writes a new checkpoint: give --out")
            if out_format != OutFormat.checkpoint or mode != Mode.steer:
                raise typer.BadParameter("--lazy makes one steering edit into a checkpoint: drop --format/--mode")
            rec = steer_checkpoint(model, out, str(direction) if direction is not None else None, eigvec=eigvec,
                                   gain=gain, strength=strength, layer=layer, solve=solve.value, overwrite=overwrite)
            typer.echo(rec.summary())
            if record_json is not None:
                rec.to_json(record_json)
            typer.echo(f"saved to {out}")
            if push_to_hub is not None:
                typer.echo(f"pushed: {push(out, push_to_hub, private=private, revision=revision, create_pr=create_pr, timeout=hub_timeout)}")
            return
        dev, dt = _device_dtype(device, dtype)  # cheap checks before loading
        m = load_for_steering(model, dtype=dt, device=dev)
        the_direction = str(direction) if direction is not None else None
        if positive is not None or negative is not None or pairs is not None:
            from steerformer.steering.contrastive import contrastive_direction

            if direction is not None:
                raise typer.BadParameter("--direction and --positive/--negative/--pairs are two direction sources: give one")
            the_direction = contrastive_direction(m, positive, negative, pairs=pairs, layer=layer,
                                                  method=contrastive_method, progress=not quiet)
        if mode == Mode.ablate:
            from steerformer_cli._common import parse_layers

            rec = steer(m, the_direction, token=token, eigvec=eigvec, text=text, mode="ablate",
                        layers=parse_layers(ablate_layers), scale=ablate_scale)
        else:
            rec = steer(m, the_direction, token=token, eigvec=eigvec, text=text,
                        strength=strength, gain=gain, target_alignment=target_alignment, measure=measure.value, solve=solve.value,
                        layer=layer, through_ffn=through_ffn, untie_last=untie_last, compensate_bias=compensate_bias,
                        progress=not quiet)
        typer.echo(rec.summary())
        if record_json is not None:
            rec.to_json(record_json)
        if out is not None:
            path = save_steered(m, out, overwrite=overwrite, format=out_format.value)
            typer.echo(f"saved to {path}")
            if push_to_hub is not None:
                url = push(path, push_to_hub, private=private, revision=revision, create_pr=create_pr,
                           timeout=hub_timeout)
                typer.echo(f"pushed: {url}")


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
