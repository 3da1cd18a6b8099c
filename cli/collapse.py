"""`steerformer collapse` and `steerformer plot-collapse`: the looped-model experiment of the
consensus paper §5.2. Thin: parse options, call steerformer.collapse, show a summary."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from steerformer_cli._common import user_errors
from steerformer_cli.main import app


def _int_list(spec: str, name: str) -> list[int]:
    from steerformer.errors import bad_argument

    try:
        out = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise bad_argument(name, spec, "comma-separated positive integers such as '1,5,10,100'") from None
    return out


@app.command("collapse")
def collapse_cmd(
    model: str = typer.Argument(..., help="Hub id, local checkpoint folder, or 'minilm'."),
    passes: int = typer.Option(10, "--passes", "-p", help="How many times the whole model is looped."),
    prompts: int = typer.Option(100, "--prompts", help="Number of random prompts (ids uniform over the vocabulary)."),
    length: int = typer.Option(200, "--length", help="Tokens per random prompt."),
    text: Optional[List[str]] = typer.Option(None, "--text", help="Use this text as a prompt instead (repeatable)."),
    no_ffn: bool = typer.Option(False, "--no-ffn", help="Drop every FFN with its norm and its residual."),
    weights: str = typer.Option("pretrained", "--weights", help="pretrained | random | random-per-pass."),
    seed: int = typer.Option(42, "--seed", help="Seed of the random prompts and of the random weights."),
    out: Path = typer.Option(Path("runs/collapse"), "--out", "-o", help="Output folder (appended pass by pass)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="fp16 | bf16 | fp32 (default: the checkpoint's)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: cpu)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Prompts run together (default: all)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run stored in --out."),
    early_stop: Optional[float] = typer.Option(None, "--early-stop", help="Stop once E < TOL for a whole pass."),
    decode: bool = typer.Option(True, "--decode/--no-decode", help="Greedy text after looping (causal LMs, pretrained weights)."),
    decode_passes: str = typer.Option("1,5,10,100", "--decode-passes", help="Loop counts for the decoding experiment."),
    decode_tokens: int = typer.Option(20, "--decode-tokens", help="New tokens per continuation."),
    decode_prompt: str = typer.Option("The capital of France is", "--decode-prompt", help="Prompt of the decoding experiment."),
) -> None:
    """Loop MODEL over the same prompts and measure how fast its tokens reach consensus (E, eq. 9)."""
    with user_errors():
        from steerformer.collapse import collapse, greedy_decode, load_causal_lm, load_tokenizer, parse_dtype
        from steerformer.loading import load_model

        from steerformer.eig import resolve_device

        resolve_device(device)  # --device cuda without CUDA: one line, exit 2
        dt = parse_dtype(dtype)
        lm = load_causal_lm(model, dtype=dt, device=device) if decode and weights == "pretrained" else None
        net = lm if lm is not None else load_model(model, dtype=dt, device=device)
        tok = load_tokenizer(model) if (text or lm is not None) else None
        try:
            res = collapse(net, passes=passes, prompts=prompts, length=length, texts=text or None, tokenizer=tok,
                           ffn=not no_ffn, weights=weights, seed=seed, batch_size=batch_size, out=out,
                           resume=resume, early_stop_tol=early_stop, progress=True)
        except KeyboardInterrupt:
            typer.echo(f"interrupted: the completed passes are kept in {out}; rerun with --resume to continue",
                       err=True)
            raise
        s = res.summary("e")
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
            dec = greedy_decode(lm, ids, passes=_int_list(decode_passes, "--decode-passes"),
                                new_tokens=decode_tokens, ffn=not no_ffn, tokenizer=tok)
            typer.echo("greedy continuation after looping:")
            for line in dec.lines():
                typer.echo("  " + line)
            dec.to_json(Path(out) / "decode.json")
            typer.echo(f"wrote {out}/decode.json")


@app.command("plot-collapse")
def plot_collapse_cmd(
    runs: List[Path] = typer.Argument(..., help="Collapse output folders (or collapse.npz files)."),
    out: Path = typer.Option(Path("collapse_runs.png"), "--out", "-o", help="Figure file to write."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Comma-separated legend labels, one per run."),
    stat: str = typer.Option("e", "--stat", help="e | pairwise | centroid."),
) -> None:
    """Put several collapse runs (e.g. the paper's four variants) on one figure."""
    with user_errors():
        from steerformer.collapse import CollapseResult, collapse_figure
        from steerformer.errors import bad_argument

        results = [CollapseResult.load(r) for r in runs]
        names = labels.split(",") if labels else None
        if names is not None and len(names) != len(results):
            raise bad_argument("--labels", labels, f"{len(results)} comma-separated labels, one per run")
        if stat not in ("e", "pairwise", "centroid"):
            raise bad_argument("--stat", stat, "one of e, pairwise, centroid")
        collapse_figure(results, labels=names, stat=stat).savefig(out, dpi=130)
        typer.echo(f"wrote {out}")
