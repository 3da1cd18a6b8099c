"""`steerformer analyze MODEL`: spectra of every attention layer's matrix F = W_O·V."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from steerformer_cli._common import parse_layers, user_errors
from steerformer_cli.main import app


def default_out(model: str) -> Path:
    return Path("runs") / re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).name or model)


@app.command("analyze")
def analyze_cmd(
    model: str = typer.Argument(..., help="Hub id (e.g. gpt2-medium), local checkpoint directory, or "
                                          "'sentence-transformers/all-MiniLM-L6-v2' (bundled, offline)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Layers to analyse, e.g. '0,5,10-12' or '-1'. Default: all."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report directory (default runs/<model name>)."),
    dtype: str = typer.Option("float64", "--dtype", help="Precision of the eigen-decomposition: float64 or float32."),
    device: Optional[str] = typer.Option(None, "--device", help="Torch device for the eigen-decomposition (cpu, cuda)."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub revision (branch, tag or commit)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report to stdout instead of the table."),
) -> None:
    """Spectra of the layer matrices: table, report.json, layers.csv, eigenvalues.npz and figures."""
    from steerformer.analyze import analyze

    with user_errors():
        report = analyze(model, layers=parse_layers(layers), dtype=dtype, device=device, revision=revision,
                         progress=not as_json)
        out_dir = out or default_out(model)
        report.save(out_dir, plots=not no_plots)
    if as_json:
        typer.echo(report.to_json())
        return
    cfg = report.meta["config"]
    typer.echo(f"{report.meta['model_id']}: {cfg['model_type']}, {cfg['n_layers']} layers, d={cfg['d_model']}, "
               f"{cfg['n_heads']} heads" + (" (shared weights)" if cfg["shares_weights"] else ""))
    typer.echo(report.table())
    typer.echo(f"report written to {out_dir}/")
