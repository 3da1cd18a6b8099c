"""`steerformer export`: a steered checkpoint as a GGUF model (llama.cpp, Ollama) or a PEFT LoRA
adapter (thin: ``formats.write_gguf_model`` and ``save_steered(format="peft")`` do the work)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from steerformer_cli._common import check_cheap_options, check_input_files, library_bars, user_errors
from steerformer_cli.app import app


class ExportFormat(str, Enum):
    """What ``steerformer export`` writes (``--format``)."""

    gguf = "gguf"
    peft = "peft"


class GGUFType(str, Enum):
    """The GGUF's matrix type (``--dtype``); llama.cpp's llama-quantize quantizes further."""

    f16 = "f16"
    bf16 = "bf16"


@app.command("export")
def export_cmd(
    steered_dir: Path = typer.Argument(..., help="A checkpoint written by `steerformer steer --out`."),
    out_format: ExportFormat = typer.Option(..., "--format", help="gguf (the whole model for llama.cpp / Ollama) "
                                            "| peft (the edits as a LoRA adapter folder)."),
    out: Path = typer.Option(..., "--out", help="The .gguf file (gguf) or the adapter folder (peft) to write."),
    source: Optional[Path] = typer.Option(None, "--source", help="gguf: the GGUF the model came from (its tokenizer "
                                          "and metadata); default the GGUF the steered model was loaded from."),
    dtype: Optional[GGUFType] = typer.Option(None, "--dtype", help="gguf: f16 (default) | bf16."),
    lora_rank: Optional[int] = typer.Option(None, "--lora-rank", help="peft: the rank of a truncated adapter for "
                                            "edits that are not low-rank (its error is reported)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier steerformer output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
) -> None:
    """Write a steered checkpoint as a GGUF model or a PEFT LoRA adapter.

    Example: steerformer export runs/smollm2-ocean --format gguf --out smollm2-ocean-f16.gguf
    """
    from steerformer.errors import SteerformerError, bad_argument

    with user_errors(), library_bars(not quiet):
        gguf = out_format == ExportFormat.gguf
        for flag, value, only in (("--source", source, "gguf"), ("--dtype", dtype, "gguf"),
                                  ("--lora-rank", lora_rank, "peft")):
            if value is not None and out_format.value != only:
                raise bad_argument(flag, str(getattr(value, "value", value)), f"{flag} only with --format {only}",
                                   f"Leave {flag} out for --format {out_format.value}.")
        check_input_files(source=source)
        from steerformer.steering import load_for_steering, read_steering, save_steered

        records = read_steering(steered_dir)[0]  # not a steered checkpoint: one line, before any weight loads

        def say(msg: str) -> None:  # loading and writing a model take seconds each: say which is running
            if not quiet:
                typer.echo(msg, err=True)
        if gguf:
            from steerformer.formats import check_target_file, write_gguf_model

            from steerformer.loading import gguf_file_of

            if source is None:  # the GGUF the steered model was loaded from (a .gguf path, the bundled SmolLM2)
                try:
                    source = gguf_file_of(records[0].model_id)
                except SteerformerError:  # the bundled SmolLM2's file is not installed: ask for --source
                    source = None
            if source is None:
                raise bad_argument("--source", None, "the GGUF the model came from (its tokenizer metadata comes "
                                   "only from llama.cpp's converter)", "Pass --source MODEL.gguf.")
            check_target_file(out, overwrite, name="--out", inputs=[steered_dir, source])
            say(f"loading {steered_dir}")
            model = load_for_steering(steered_dir)
            say(f"writing {out} ({(dtype or GGUFType.f16).value}, metadata from {source})")
            path = write_gguf_model(model, out, source=source, dtype=(dtype or GGUFType.f16).value, overwrite=overwrite)
            typer.echo(f"saved to {path} (llama-cli -m {path.name}; ollama create NAME with FROM ./{path.name})")
        else:
            check_cheap_options(out=out, kind="steer", overwrite=overwrite, inputs=[steered_dir])
            say(f"loading {steered_dir}")
            model = load_for_steering(steered_dir)
            say(f"writing {out} (the edits as a LoRA adapter)")
            path = save_steered(model, out, overwrite=overwrite, format="peft", lora_rank=lora_rank)
            typer.echo(f"saved to {path} (PeftModel.from_pretrained(base, {str(path)!r}))")
