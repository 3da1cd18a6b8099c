"""Shared CLI helpers: turn library errors into one clean line and exit code 2."""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import typer

from steerformer.errors import SteerformerError, bad_argument


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a steerformer error as one line on stderr (no traceback) and exit with status 2."""
    try:
        yield
    except SteerformerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(code=130) from None


def parse_layers(spec: str | None) -> list[int] | None:
    """Parse ``--layers`` as ``"0,3,5"``, ``"2-5"`` (inclusive), ``"-1"`` or a mix; ``None`` = all."""
    if spec is None or spec.strip() == "":
        return None
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(-?\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise bad_argument(
                "--layers", spec, "comma-separated layer indices or inclusive ranges such as '0,2,5-7'"
            )
        lo = int(m.group(1))
        out.extend(range(lo, int(m.group(2)) + 1) if m.group(2) is not None else [lo])
    return out
