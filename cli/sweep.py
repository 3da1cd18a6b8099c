"""`steerformer sweep MODEL --revisions a,b,c` (or `--models a,b,c`): analyze many checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from steerformer_cli._common import MODEL_HELP, default_out, parse_layers, user_errors
from steerformer_cli.app import app


@app.command("sweep")
def sweep_cmd(
    model: Optional[str] = typer.Argument(None, help=MODEL_HELP[:-1] + " (with --revisions)."),
    revisions: Optional[str] = typer.Option(None, "--revisions", help="Comma-separated revisions of MODEL, e.g. 'step1000,step2000'."),
    models: Optional[str] = typer.Option(None, "--models", help="Comma-separated models instead of MODEL --revisions."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default runs/sweep/<name>); rerun to resume."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Layers, e.g. '0,5,10-12'. Default: all."),
    executor: str = typer.Option("local", "--executor", help="local (this machine) or ray (a local Ray instance or a cluster)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster to join ('auto': the running one). Default: start a local instance."),
    workers: int = typer.Option(1, "--workers", help="Parallel tasks (local processes, or CPUs of a local Ray instance)."),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="Only the K eigenvalues of largest real part (default: full for d <= 2048, 16 above; 0 = full)."),
    eig_dtype: str = typer.Option("float64", "--eig-dtype", help="Precision of the eigen-decomposition: float64 or float32."),
    stats: bool = typer.Option(False, "--stats", help="Also run the power-method statistics per checkpoint (Δρ, P)."),
    n_prompts: int = typer.Option(100, "--n-prompts", help="With --stats: random prompts of the controlled dynamics."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figure."),
    device: Optional[str] = typer.Option(None, "--device", help="Torch device of each task's eig and dynamics (cpu, cuda)."),
) -> None:
    """Spectra of every checkpoint (one task per checkpoint and layer), one report per checkpoint,
    sweep.csv and sweep.png (λ1, gap, and with --stats Δρ, P against the checkpoint)."""
    from steerformer.sweep import checkpoints_from, sweep

    with user_errors():
        cks = checkpoints_from(model, revisions, models)
        name = Path(model).name if model else "models"
        out_dir = out or default_out("sweep", name)
        res = sweep(cks, out_dir, layers=parse_layers(layers), top_k="auto" if top_k is None else top_k,
                    dtype=eig_dtype, executor=executor, workers=workers, ray_address=ray_address,
                    stats={"n_prompts": n_prompts, "full_model": False, "cumulative": False} if stats else None,
                    plots=not no_plots, device=device)
    typer.echo(res.summary())
    typer.echo(f"written to {out_dir}/ (sweep.csv, sweep.json, one report per checkpoint)")
