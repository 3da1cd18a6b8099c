"""`steerformer export`: a steered checkpoint written as one of the registered output formats
(thin: ``steerformer.steering.exports`` holds the formats and their writers; ``--format`` offers
exactly the registered names)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from steerformer.steering import format_names, get_format
from steerformer_cli._common import check_cheap_options, check_input_files, library_bars, user_errors
from steerformer_cli.app import app

#: ``--format``: the registered output formats (steering/exports.py), read without torch
ExportFormat = Enum("ExportFormat", {n.replace("-", "_"): n for n in format_names()}, type=str)


#: The GGUF's matrix type (``--dtype``); llama.cpp's llama-quantize quantizes further.
GGUFType = Enum("GGUFType", {n: n for n in ("f16", "bf16")}, type=str)


@app.command("export")
def export_cmd(
    steered_dir: Path = typer.Argument(..., help="A checkpoint written by `steerformer steer --out` (control-vector: "
                                       "also its record JSON, `steer --record`)."),
    out_format: ExportFormat = typer.Option(..., "--format", help=" | ".join(
        f"{n} ({get_format(n).help})" for n in format_names()) + "."),
    out: Path = typer.Option(..., "--out", help="The folder (checkpoint, peft) or file (gguf, control-vector) to "
                             "write."),
    source: Optional[Path] = typer.Option(None, "--source", help="gguf: the GGUF the model came from (its tokenizer "
                                          "and metadata); default the GGUF the steered model was loaded from."),
    dtype: Optional[GGUFType] = typer.Option(None, "--dtype", help="gguf: f16 (default) | bf16."),
    lora_rank: Optional[int] = typer.Option(None, "--lora-rank", help="peft: the rank of a truncated adapter for "
                                            "edits that are not low-rank (its error is reported)."),
    model_hint: Optional[str] = typer.Option(None, "--model-hint", help="control-vector: the model's llama.cpp "
                                             "architecture (default the one recorded with the steer)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier steerformer output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
) -> None:
    """Write a steered checkpoint as another format: the checkpoint, a PEFT LoRA adapter, a GGUF
    model or a llama.cpp control vector.

    Example: steerformer export runs/smollm2-ocean --format gguf --out smollm2-ocean-f16.gguf
    """
    with user_errors(), library_bars(not quiet):
        if model_hint is not None:
            from steerformer.formats import check_model_hint

            check_model_hint(model_hint, "--model-hint")
        fmt = get_format(out_format.value)
        options = {"source": source, "dtype": getattr(dtype, "value", None), "lora_rank": lora_rank,
                   "model_hint": model_hint}
        check_input_files(source=source if "source" in fmt.options else None)
        if fmt.target == "folder":
            check_cheap_options(out=out, kind="steer", overwrite=overwrite, inputs=[steered_dir])

        def say(msg: str) -> None:  # loading and writing a model take seconds each: say which is running
            if not quiet:
                typer.echo(msg, err=True)

        _, line = fmt.write(steered_dir, out, overwrite=overwrite, say=say, **options)
        typer.echo(line)
