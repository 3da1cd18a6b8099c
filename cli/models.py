"""`steerformer models`: the supported families, their declared facts and which features run."""

from __future__ import annotations

import json

import typer

from steerformer_cli.app import app


@app.command("models")
def models(
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the table as Markdown (the table of docs/families.md)."),
) -> None:
    """List the supported model families: head layout, positions, norm, residual, features."""
    from steerformer.adapters import FEATURES, markdown_table, supported_families

    fams = supported_families()
    if as_json:
        typer.echo(json.dumps([f.to_dict() for f in fams], indent=2))
        return
    if markdown:
        typer.echo(markdown_table(fams))
        return
    cols = ("model_type", "heads", "positions", "norm", "residual", "qkv_layout")
    widths = {c: max(len(c), *(len(str(getattr(f, c))) for f in fams)) for c in cols}
    typer.echo("  ".join(c.ljust(widths[c]) for c in cols) + "  features")
    for f in fams:
        feats = "all" if f.features == FEATURES else ",".join(f.features)
        line = "  ".join(str(getattr(f, c)).ljust(widths[c]) for c in cols) + "  " + feats
        typer.echo(line + (f"  ({f.note})" if f.note else ""))
    typer.echo(f"features: {', '.join(FEATURES)}")
