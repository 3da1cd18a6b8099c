"""`steerformer evaluate`: judge steering on held-out chat answers (thin; steerformer.steering.evaluation.evaluate)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from steerformer.configs import check_max_kl
from steerformer.errors import bad_argument
from steerformer.outputs import EVALUATE, write_atomically
from steerformer.report import PAGE_NAME, add_page
import steerformer.steering as steering  # the lazy face: names resolve (and torch loads) when a command runs
from steerformer_cli._common import (
    MODEL_HELP, check_cheap_options, check_layers_early, library_bars, parse_layers, user_errors,
)
from steerformer_cli.app import app


def _floats(spec: str, name: str) -> list[float]:
    try:
        values = [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) for v in values):
        raise bad_argument(name, spec, "comma-separated finite numbers such as '0.1,0.2' (negative steers away)")
    return values


@app.command("evaluate")
def evaluate_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    token: str = typer.Option(..., "--token", help="The concept: a word or a phrase (its simple forms count)."),
    out: Path = typer.Option(..., "--out", help="Folder for evaluation.json, evaluation.csv, evaluation_curve.png, "
                               "report.html."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Activation addition at each of these layers "
                                         "(default: the model's middle layers, the addition's scan)."),
    coeffs: str = typer.Option("0.15,0.25", "--coeffs", help="Coefficients of the addition, in residual norms."),
    max_kl: Optional[float] = typer.Option(None, "--max-kl", help="KL budget of the default steer (default 0.5)."),
    questions: int = typer.Option(8, "--questions", help="Held-out questions (at most 16 built in)."),
    max_new_tokens: int = typer.Option(40, "--max-new-tokens", help="Tokens per answer."),
    sample: bool = typer.Option(False, "--sample", help="Seeded sampling instead of greedy answers."),
    seed: int = typer.Option(0, "--seed", help="Seed of --sample."),
    chat: bool = typer.Option(True, "--chat/--no-chat", help="Prompts through the tokenizer's chat template."),
    judge: str = typer.Option("offline", "--judge", help="Who rates each answer 0-2 on concept, relevance, fluency: "
                              "offline (bundled MiniLM + the base model), the URL of an OpenAI-compatible server "
                              "(llama-server, vLLM), or none."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="--judge URL: the served model's name."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier evaluation in --out."),
    quiet: bool = typer.Option(False, "--quiet", help="No phase lines on stderr."),
) -> None:
    """Judge the default steer and activation addition over layers x coefficients on held-out answers
    (concept rate, KL, distinct-2, fluency, and the judge's concept/relevance/fluency ratings, their
    harmonic mean and the share of good steers); print the table and sample answers, write the curve.

    Example: steerformer evaluate smollm2 --token ocean --out runs/ocean-eval
    """
    from steerformer.loading import load_tokenizer

    with user_errors(), library_bars(not quiet):
        check_cheap_options(out=out, kind="evaluate", overwrite=overwrite, inputs=[model])
        hook_layers = parse_layers(layers, name="--layers")
        cs = _floats(coeffs, "--coeffs")
        if not 1 <= questions <= len(steering.HELDOUT_QUESTIONS):
            raise bad_argument("--questions", questions, f"a number in [1, {len(steering.HELDOUT_QUESTIONS)}]")
        if max_new_tokens < 1:
            raise bad_argument("--max-new-tokens", max_new_tokens, "a whole number >= 1")
        the_judge = steering.make_judge(judge, model=judge_model, name="--judge", model_name="--judge-model")
        if max_kl is not None:
            check_max_kl(max_kl)  # the one check of a KL budget (steerformer.configs), before loading
        check_layers_early(model, hook_layers, "--layers")
        say = (lambda line: None) if quiet else (lambda line: typer.echo(line, err=True))
        m = steering.load_for_steering(model)
        say(f"loaded {model}")  # after: a checkpoint refused while loading shows its one error line alone
        steering.check_generates(m, value=model)  # an encoder cannot answer: one line, before any work
        tok = load_tokenizer(m)
        if tok is None:
            raise bad_argument("model", model, "a checkpoint with its tokenizer (answers are generated from text)")
        ev = steering.steer_and_hooks(m, tok, token, layers=hook_layers, coeffs=cs, max_kl=max_kl, questions=questions,
                                      max_new_tokens=max_new_tokens, chat=chat, sample=sample, seed=seed,
                                      judge=the_judge, say=say)
        write_atomically(out, lambda tmp: (ev.save(tmp), add_page(tmp)), kind=EVALUATE, overwrite=overwrite,
                         inputs=[model], name="--out")
        typer.echo(ev.summary())
        best = ev.points[0]
        typer.echo("sample answers (base -> default steer):")
        for b, s in list(zip(ev.base_answers, best.answers))[:3]:
            typer.echo(f"  - {b[:100]!r}\n    -> {s[:100]!r}")
        typer.echo(f"saved to {out} (open {out}/{PAGE_NAME} in a browser)")
