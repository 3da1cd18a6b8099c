"""`steerformer direction make | export-gguf | push`: directions as shareable artefacts (thin)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from steerformer.errors import bad_argument
import steerformer.steering as steering  # the lazy face: names resolve (and torch loads) when a command runs
from steerformer_cli._common import MODEL_HELP, check_cheap_options, check_input_files, check_layers_early, parse_layers, user_errors
from steerformer_cli.app import SteerformerCommand, SteerformerGroup, app

direction_app = typer.Typer(help="Directions as shareable artefacts: make one from prompts, export it for "
                                 "llama.cpp, publish it.", no_args_is_help=True, cls=SteerformerGroup)
app.add_typer(direction_app, name="direction")


#: How the contrastive direction is taken (``--method``).
Method = Enum("Method", {"mean_diff": "mean-diff", "pca": "pca"}, type=str)


@direction_app.command("make", cls=SteerformerCommand)  # flags render as flags
def make_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
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
    with user_errors():
        chosen = parse_layers(layers)
        check_input_files(positive=positive, negative=negative, pairs=pairs)
        check_cheap_options(out=out, kind="direction", overwrite=overwrite)  # before the model loads
        if pairs is None and (positive is None or negative is None):
            raise bad_argument("--positive" if positive is None else "--negative", None,
                               "prompts on both sides: --positive and --negative (files), or --pairs (JSONL)")
        check_layers_early(model, chosen, "--layers")
        m = steering.load_for_steering(model)
        d = steering.contrastive_directions(m, positive, negative, pairs=pairs, layers=chosen,
                                   method=method.value)
        path = d.save(out, overwrite=overwrite)
        typer.echo(f"{d!r}\nsaved to {path}")


@direction_app.command("export-gguf", cls=SteerformerCommand)  # flags render as flags
def export_gguf_cmd(
    direction: str = typer.Argument(..., help="A direction folder or Hub id (direction make: unit vectors), or a "
                                    ".npy vector (with --layers and --model-hint). A steer's vectors: `steerformer "
                                    "export DIR --format control-vector`."),
    out: Path = typer.Option(..., "--out", help="The control-vector .gguf to write."),
    model_hint: Optional[str] = typer.Option(None, "--model-hint", help="The model's llama.cpp architecture "
                                             "(e.g. llama); default the one recorded with the direction or steer."),
    layers: Optional[str] = typer.Option(None, "--layers", help="A .npy vector: the layers it is added after, such "
                                         "as '19' or '12,15' (N >= 1)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier steerformer .gguf."),
) -> None:
    """Write a direction as a llama.cpp control vector (direction.N = layer N, N >= 1).

    Example: steerformer direction export-gguf runs/music --out music.gguf
    """
    with user_errors():
        if model_hint is not None:
            from steerformer.formats import check_model_hint

            check_model_hint(model_hint, "--model-hint")
        source = Path(direction).expanduser()
        chosen = parse_layers(layers)
        if source.suffix == ".npy":
            if chosen is None or model_hint is None:
                raise bad_argument("--layers" if chosen is None else "--model-hint", None,
                                   "with a .npy vector: --layers (where it is added) and --model-hint (the model's "
                                   "llama.cpp architecture)", "Add e.g. --layers 19 --model-hint llama.")
            import numpy as np

            v = np.asarray(steering.read_npy(source, name="direction"), dtype=np.float64).reshape(-1)
            d = steering.Direction({n: v[None] for n in chosen}, method="a .npy vector",
                          metadata={"scale": "as given: strength S adds S x the .npy vector"})
        elif chosen is not None:
            raise bad_argument("--layers", layers, "--layers only with a .npy vector (a direction or a steer holds "
                               "its layers)", "Drop --layers.")
        elif (source / "steerformer" / "record.json").is_file() or (source.is_file() and source.suffix == ".json"):
            # one route per output: a steer's vectors are an export format of the steered checkpoint
            raise bad_argument("direction", direction, "a direction folder, Hub id or .npy vector (this is a steer)",
                               f"Run: steerformer export {direction} --format control-vector --out {out}")
        else:
            d = steering.Direction.load(direction)
        cv = d.to_control_vector(model_hint)
        path = cv.save(out, overwrite=overwrite, name="out")
        typer.echo(f"saved to {path}: {cv.notes['scale']}")
        typer.echo(f"llama-cli -m MODEL.gguf --control-vector-scaled {path.name} 1.0")


@direction_app.command("push", cls=SteerformerCommand)  # flags render as flags
def push_cmd(
    direction: str = typer.Argument(..., help="A direction folder (Direction.save)."),
    repo_id: str = typer.Argument(..., help="The Hub repo id, 'namespace/name'."),
    private: bool = typer.Option(False, "--private", help="Create the Hub repo as private."),
    hub_timeout: float = typer.Option(30.0, "--hub-timeout", help="Seconds each Hub request may wait for an answer."),
) -> None:
    """Publish a direction folder on the Hugging Face Hub, with its card.

    Example: steerformer direction push runs/music alice/minilm-music-direction
    """
    with user_errors():
        typer.echo(f"pushed: {steering.Direction.load(direction).push_to_hub(repo_id, private=private, timeout=hub_timeout)}")
