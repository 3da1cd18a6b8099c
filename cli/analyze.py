"""`steerformer analyze MODEL`: spectra of every attention layer's matrix F = W_O·V."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from steerformer_cli._common import check_cheap_options, parse_layers, user_errors
from steerformer_cli.main import app


class EigDtype(str, Enum):
    """Precision of the eigen-decomposition (``--dtype``)."""

    float64 = "float64"
    float32 = "float32"


def default_out(model: str) -> Path:
    from steerformer.outputs import safe_folder_name

    local = Path(model).expanduser()
    return Path("runs") / safe_folder_name(local.resolve().name if local.is_dir() else model)


@app.command("analyze")
def analyze_cmd(
    model: str = typer.Argument(..., help="Hub id (e.g. gpt2-medium), local checkpoint directory, or "
                                          "'sentence-transformers/all-MiniLM-L6-v2' (bundled, offline)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Layers to analyse, e.g. '0,5,10-12' or '-1'. Default: all."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report directory (default runs/<model name>)."),
    dtype: EigDtype = typer.Option(EigDtype.float64, "--dtype", help="Precision of the eigen-decomposition."),
    device: Optional[str] = typer.Option(None, "--device", help="Torch device for the eigen-decomposition (cpu, cuda)."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub revision (branch, tag or commit)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the figures."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report to stdout instead of the table."),
    spectra_only: bool = typer.Option(False, "--spectra-only", help="Skip the power-method statistics."),
    n_prompts: int = typer.Option(100, "--n-prompts", help="Random prompts of the controlled dynamics."),
    n_tokens: int = typer.Option(10, "--n-tokens", help="Tokens per random prompt."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random initial tokens."),
    raw_initial: bool = typer.Option(False, "--raw-initial", help="Run the initial tokens as drawn from N(0, I), not normalized (Appendix B's literal reading)."),
    tau: float = typer.Option(1.0, "--tau", help="Step size τ of the dynamics x + τ F A x (paper: 1)."),
    layer_norm: Optional[bool] = typer.Option(None, "--layer-norm/--no-layer-norm", help="Apply the model's own pre-attention norm (LayerNorm or RMSNorm: ln_1, input_layernorm) before attention, or not. Default: both, for pre-LN models."),
    null_draws: int = typer.Option(5, "--null-draws", help="Random-weight draws of the null model (beyond-chance verdict); 0 = off."),
    bias: bool = typer.Option(False, "--bias", help="Keep the value/output biases in the dynamics."),
    prolong: Optional[int] = typer.Option(None, "--prolong", help="Prolonged run: apply the layers K times (default 10 for shared-weight models such as ALBERT)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Text file, one prompt per line, for the full-model variant (default: built-in sentences)."),
    no_full_model: bool = typer.Option(False, "--no-full-model", help="Skip the full-model variant (model's own hidden states)."),
    no_cumulative: bool = typer.Option(False, "--no-cumulative", help="Skip the cumulative-product statistic (Fig. 8)."),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="With --spectra-only: only the K eigenvalues of largest real part per layer (Arnoldi, falls back to full eig). Default: full for d <= 2048, 16 above; 0 = full."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Processes for the per-layer eig (default: the cores, for d >= 512)."),
) -> None:
    """Spectra of the layer matrices and the power-method statistics: table, one verdict line per
    layer, report.json, layers.csv, alignment.csv, NPZ arrays and figures.

    Example: steerformer analyze sentence-transformers/all-MiniLM-L6-v2 --layers 0-2 --out runs/minilm
    """
    from steerformer.analyze import analyze
    from steerformer.outputs import ANALYZE, write_atomically
    from steerformer.stats import StatsConfig

    with user_errors():
        from steerformer.errors import bad_argument

        if top_k is not None and (top_k < 0 or (top_k > 0 and not spectra_only)):
            raise bad_argument("--top-k", top_k, "a non-negative integer, used with --spectra-only "
                               "(the statistics need every eigenvector)", "Add --spectra-only or drop --top-k.")
        if workers is not None and workers < 1:
            raise bad_argument("--workers", workers, "an integer ≥ 1")
        out_dir = out or default_out(model)
        check_cheap_options(out=out_dir, kind="analyze", overwrite=True, inputs=[model], device=device)
        if prompts is not None and not (spectra_only or no_full_model):
            from steerformer.stats.full_model import read_prompts_file

            read_prompts_file(prompts)  # a bad file is refused before the eigen-decompositions
        report = analyze(model, layers=parse_layers(layers), dtype=dtype.value, device=device, revision=revision,
                         progress=not as_json, top_k="auto" if top_k is None else top_k, workers=workers,
                         stats=False if spectra_only else StatsConfig(
                             n_prompts=n_prompts, n_tokens=n_tokens, seed=seed, tau=tau, layer_norm=layer_norm,
                             normalize_initial=not raw_initial, null_draws=null_draws,
                             bias=bias, prolong=prolong, full_model=not no_full_model, prompts=prompts,
                             cumulative=not no_cumulative))
        write_atomically(out_dir, lambda tmp: report.save(tmp, plots=not no_plots), overwrite=True, kind=ANALYZE,
                         inputs=[model], name="--out")
    if as_json:
        typer.echo(report.to_json())
        return
    cfg = report.meta["config"]
    typer.echo(f"{report.meta['model_id']}: {cfg['model_type']}, {cfg['n_layers']} layers, d={cfg['d_model']}, "
               f"{cfg['n_heads']} heads" + (" (shared weights)" if cfg["shares_weights"] else ""))
    typer.echo(report.table())
    if report.power is not None:
        typer.echo("")
        typer.echo(f"power-method statistics ({report.power.options['n_prompts']} × {n_tokens} random tokens, controlled dynamics):")
        for line in report.power.verdict_lines():
            typer.echo("  " + line)
        typer.echo(report.power.summary())
        for name in ("controlled_layer_norm", "full_model", "prolonged"):
            st = report.power.variants().get(name)
            if st is not None:
                typer.echo(f"{name.replace('_', ' ')}: {st.summary()}")
        if "full_model_skipped" in report.power.options:
            typer.echo(f"full model skipped: {report.power.options['full_model_skipped']}")
    typer.echo(f"report written to {out_dir}/")
