"""`steerformer collapse` and `steerformer plot-collapse`: the looped-model experiment of the
consensus paper §5.2. Thin: parse options, call steerformer.collapse, show a summary."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from steerformer_cli._common import check_cheap_options, user_errors
from steerformer_cli.main import app


class Weights(str, Enum):
    """Which weights are looped (``--weights``)."""

    pretrained = "pretrained"
    random = "random"
    random_per_pass = "random-per-pass"


class RunDtype(str, Enum):
    """Precision of the looped run (``--dtype``)."""

    fp16 = "fp16"
    bf16 = "bf16"
    fp32 = "fp32"
    fp64 = "fp64"


class Stat(str, Enum):
    """Statistic plotted by ``plot-collapse`` (``--stat``)."""

    e = "e"
    pairwise = "pairwise"
    centroid = "centroid"


def _int_list(spec: str, name: str) -> list[int]:
    from steerformer.errors import bad_argument

    try:
        out = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise bad_argument(name, spec, "comma-separated positive integers such as '1,5,10,100'")
    return out


@app.command("collapse")
def collapse_cmd(
    model: str = typer.Argument(..., help="Hub id, local checkpoint folder, or 'minilm'."),
    passes: int = typer.Option(10, "--passes", "-p", help="How many times the whole model is looped."),
    prompts: int = typer.Option(100, "--prompts", help="Number of random prompts (ids uniform over the vocabulary)."),
    length: int = typer.Option(200, "--length", help="Tokens per random prompt."),
    text: Optional[List[str]] = typer.Option(None, "--text", help="Use this text as a prompt instead (repeatable)."),
    no_ffn: bool = typer.Option(False, "--no-ffn", help="Drop every FFN with its norm and its residual."),
    weights: Weights = typer.Option(Weights.pretrained, "--weights", help="Pretrained weights, one random draw, or a new draw every pass."),
    seed: int = typer.Option(42, "--seed", help="Seed of the random prompts and of the random weights."),
    out: Path = typer.Option(Path("runs/collapse"), "--out", "-o", help="Output folder (appended pass by pass)."),
    dtype: Optional[RunDtype] = typer.Option(None, "--dtype", help="Run precision (default: the checkpoint's)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: cpu)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Prompts run together (default: all)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run stored in --out."),
    early_stop: Optional[float] = typer.Option(None, "--early-stop", help="Stop once E < TOL for a whole pass."),
    e_precision: str = typer.Option("float64", "--e-precision", help="float64 (accurate E, default) | states (the reference code's 1 - mean cos in the states' dtype, to reproduce the paper's fp16 curves)."),
    decode: bool = typer.Option(True, "--decode/--no-decode", help="Greedy text after looping (causal LMs, pretrained weights)."),
    decode_passes: str = typer.Option("1,5,10,100", "--decode-passes", help="Loop counts for the decoding experiment."),
    decode_tokens: int = typer.Option(20, "--decode-tokens", help="New tokens per continuation."),
    decode_prompt: str = typer.Option("The capital of France is", "--decode-prompt", help="Prompt of the decoding experiment."),
) -> None:
    """Loop MODEL over the same prompts and measure how fast its tokens reach consensus (E, eq. 9).

    Example: steerformer collapse sentence-transformers/all-MiniLM-L6-v2 --passes 20 --prompts 8 --length 32
    """
    weights = weights.value
    dtype = dtype.value if dtype is not None else None
    with user_errors():
        from steerformer.collapse import collapse, greedy_decode, load_causal_lm, load_tokenizer, parse_dtype
        from steerformer.collapse.metrics import E_PRECISIONS
        from steerformer.errors import bad_argument
        from steerformer.loading import load_model

        if e_precision not in E_PRECISIONS:
            raise bad_argument("--e-precision", e_precision, f"one of {', '.join(E_PRECISIONS)}")
        dt = parse_dtype(dtype)
        check_cheap_options(out=out, kind="collapse", inputs=[model], device=device, incremental=True)
        decode_loops = _int_list(decode_passes, "--decode-passes") if decode else None
        lm = load_causal_lm(model, dtype=dt, device=device) if decode and weights == "pretrained" else None
        net = lm if lm is not None else load_model(model, dtype=dt, device=device)
        tok = load_tokenizer(model) if (text or lm is not None) else None
        try:
            res = collapse(net, passes=passes, prompts=prompts, length=length, texts=text or None, tokenizer=tok,
                           ffn=not no_ffn, weights=weights, seed=seed, batch_size=batch_size, out=out,
                           resume=resume, early_stop_tol=early_stop, e_precision=e_precision, progress=True)
        except KeyboardInterrupt:
            typer.echo(f"interrupted: the completed passes are kept in {out}; rerun with --resume to continue",
                       err=True)
            raise
        s = res.quantiles("e")
        typer.echo(f"{res.meta['model_id']} ({res.meta['model_type']}, {res.n_blocks} blocks, {res.options['dtype']}, "
                   f"{res.options['weights']} weights, {'with' if res.options['ffn'] else 'without'} FFN): "
                   f"{res.n_passes} passes over {res.n_prompts} prompts × {res.options['length']} tokens"
                   + (" (stopped early)" if res.meta["stopped_early"] else ""))
        for k in sorted({0, *[p * res.n_blocks for p in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
                              if p <= res.n_passes], res.n_passes * res.n_blocks}):
            typer.echo(f"  after {k // res.n_blocks:>4} passes (layer {k:>6}): E mean {s['mean'][k]:.3e}  "
                       f"[q05 {s['q05'][k]:.2e}, q95 {s['q95'][k]:.2e}]")
        typer.echo(f"wrote {out}/collapse.json, collapse.npz, collapse.png")
        if lm is not None:
            ids = tok(decode_prompt)["input_ids"] if tok is not None else res.token_ids[0, :10].tolist()
            dec = greedy_decode(lm, ids, passes=decode_loops,
                                new_tokens=decode_tokens, ffn=not no_ffn, tokenizer=tok)
            typer.echo("greedy continuation after looping:")
            for line in dec.lines():
                typer.echo("  " + line)
            dec.save(out)
            typer.echo(f"wrote {out}/decode.json")


@app.command("plot-collapse")
def plot_collapse_cmd(
    runs: List[Path] = typer.Argument(..., help="Collapse output folders (or collapse.npz files)."),
    out: Path = typer.Option(Path("collapse_runs.png"), "--out", "-o",
                             help="Figure file to write (.png, .pdf, .svg); an existing folder gets collapse_runs.png."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Comma-separated legend labels, one per run."),
    stat: Stat = typer.Option(Stat.e, "--stat", help="Which statistic to plot."),
) -> None:
    """Put several collapse runs (e.g. the paper's four variants) on one figure.

    Example: steerformer plot-collapse runs/minilm runs/minilm-random --labels pretrained,random
    """
    stat = stat.value
    with user_errors():
        from steerformer.collapse import CollapseResult, collapse_figure
        from steerformer.collapse.plot import figure_path
        from steerformer.errors import bad_argument
        from steerformer.outputs import write_file_atomically

        if stat not in ("e", "pairwise", "centroid"):
            raise bad_argument("--stat", stat, "one of e, pairwise, centroid")
        target, fmt = figure_path(out)
        names = labels.split(",") if labels else None
        if names is not None and len(names) != len(runs):
            raise bad_argument("--labels", labels, f"{len(runs)} comma-separated labels, one per run")
        results = [CollapseResult.load(r) for r in runs]
        fig = collapse_figure(results, labels=names, stat=stat)
        try:
            write_file_atomically(target, lambda tmp: fig.savefig(tmp, dpi=130, format=fmt))
        except OSError as exc:
            raise bad_argument("--out", str(out), f"a file that can be written ({exc.strerror or exc})",
                               "Pick a folder you have write permission for.") from None
        typer.echo(f"wrote {target}")
