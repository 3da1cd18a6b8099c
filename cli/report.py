"""`steerformer report`: the HTML page of an existing output folder (thin; steerformer.report)."""

from __future__ import annotations

from pathlib import Path

import typer
from steerformer.report import write_report
import steerformer.steering as steering  # the lazy face: names resolve (and torch loads) when a command runs
from steerformer_cli._common import user_errors
from steerformer_cli.app import app


@app.command("report")
def report_cmd(
    folder: Path = typer.Argument(..., help="An output folder of steer --evaluate, evaluate or analyze."),
) -> None:
    """Write FOLDER/report.html: one self-contained page (no network) with the answers plain and steered
    under a strength slider, the dose curve and the edit's facts; or the spectra, the statistics and
    the verdict of an analysis. An earlier page steerformer wrote is replaced.

    Example: steerformer report runs/smollm2-ocean
    """
    with user_errors():
        section = None
        if (folder / "steerformer" / "record.json").is_file():  # a steered checkpoint: its method's section
            section = steering.record_section(steering.read_records(folder)[-1])
        path = write_report(folder, name="FOLDER", section=section)
    typer.echo(f"wrote {path} (open it in a browser)")
