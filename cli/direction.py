"""`steerformer direction make | export-gguf | push`: directions as shareable artefacts (thin)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from steerformer_cli._common import parse_layers, user_errors
from steerformer_cli.app import app

direction_app = typer.Typer(help="Directions as shareable artefacts: make one from prompts, export it for "
                                 "llama.cpp, publish it.", no_args_is_help=True)
app.add_typer(direction_app, name="direction")


class Method(str, Enum):
    """How the contrastive direction is taken (``--method``)."""

    mean_diff = "mean-diff"
    pca = "pca"


@direction_app.command("make")
def make_cmd(
    model: str = typer.Argument(..., help="Checkpoint folder, Hub id, or 'minilm'."),
    out: Path = typer.Option(..., "--out", help="The direction folder to write (direction.safetensors + .json)."),
    positive: Optional[Path] = typer.Option(None, "--positive", help="A text file of positive prompts (one per line)."),
    negative: Optional[Path] = typer.Option(None, "--negative", help="A text file of negative prompts (one per line)."),
    pairs: Optional[Path] = typer.Option(None, "--pairs", help='A JSONL file of {"positive": ..., "negative": ...} lines.'),
    layers: str = typer.Option("-1", "--layers", help="Layers such as '-1' or '3,5-7' (layer N = the output of block N)."),
    method: Method = typer.Option(Method.mean_diff, "--method", help="mean-diff | pca."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier direction folder."),
) -> None:
    """Contrast positive and negative prompts at each layer and save the direction(s).

    Example: steerformer direction make minilm --positive pos.txt --negative neg.txt --layers 3,5 --out runs/music
    """
    from steerformer.steering import contrastive_directions, load_for_steering

    with user_errors():
        m = load_for_steering(model)
        d = contrastive_directions(m, positive, negative, pairs=pairs, layers=parse_layers(layers),
                                   method=method.value)
        path = d.save(out, overwrite=overwrite)
        typer.echo(f"{d!r}\nsaved to {path}")


@direction_app.command("export-gguf")
def export_gguf_cmd(
    direction: str = typer.Argument(..., help="A direction folder or Hub id (Direction.save)."),
    out: Path = typer.Option(..., "--out", help="The control-vector .gguf to write."),
    model_hint: Optional[str] = typer.Option(None, "--model-hint", help="The model's llama.cpp architecture "
                                             "(e.g. llama); default the one recorded with the direction."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier steerformer .gguf."),
) -> None:
    """Write a direction as a llama.cpp control vector (direction.N = layer N, N >= 1).

    Example: steerformer direction export-gguf runs/music --out music.gguf --model-hint llama
    """
    from steerformer.steering import Direction

    with user_errors():
        path = Direction.load(direction).to_control_vector(model_hint).save(out, overwrite=overwrite)
        typer.echo(f"saved to {path} (llama-cli --control-vector-scaled {path.name} 1.0)")


@direction_app.command("push")
def push_cmd(
    direction: str = typer.Argument(..., help="A direction folder (Direction.save)."),
    repo_id: str = typer.Argument(..., help="The Hub repo id, 'namespace/name'."),
    private: bool = typer.Option(False, "--private", help="Create the Hub repo as private."),
    hub_timeout: float = typer.Option(30.0, "--hub-timeout", help="Seconds each Hub request may wait for an answer."),
) -> None:
    """Publish a direction folder on the Hugging Face Hub, with its card.

    Example: steerformer direction push runs/music alice/minilm-music-direction
    """
    from steerformer.steering import Direction

    with user_errors():
        typer.echo(f"pushed: {Direction.load(direction).push_to_hub(repo_id, private=private, timeout=hub_timeout)}")
