"""Entry point of the ``steerformer`` console script.

Each command lives in its own module and registers itself on ``app``; this file only assembles
them and configures logging, so that adding a command never touches the others.
"""

from __future__ import annotations

import logging

import typer

app = typer.Typer(
    name="steerformer",
    help="See, measure and steer how tokens move through a transformer's layers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


# Command modules register on import (order = order in --help).
from steerformer_cli import analyze as _analyze  # noqa: E402,F401
from steerformer_cli import collapse as _collapse  # noqa: E402,F401
from steerformer_cli import simulate as _simulate  # noqa: E402,F401
from steerformer_cli import steer as _steer  # noqa: E402,F401
from steerformer_cli import sweep as _sweep  # noqa: E402,F401
