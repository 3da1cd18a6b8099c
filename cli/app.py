"""The ``steerformer`` Typer application: the group, its options and how commands render.

Command modules import ``app`` from here and register on it; ``main.py`` imports the command
modules (so that they register) and is the console script's entry point. Keeping ``app`` out of
``main.py`` leaves ``cli/`` without an import cycle (tests/test_package_layout.py).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
from enum import Enum
from typing import Any, Optional

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from steerformer import __version__
from steerformer.errors import bad_argument

try:  # typer >= 0.2x vendors click; older typer runs on click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions


def _tidy_params(params: list) -> list:
    """Render the help the classic way, whatever the installed typer does.

    typer >= 0.2x prints a value type after every option, flags included (``--no-plots <bool>``,
    which reads as if the flag took a value: ``--no-plots true`` is then an error), and wraps a
    required argument in braces on the usage line (``{model}``). This is the one place that turns
    both back: a flag shows no value type, an argument shows as ``MODEL``.
    """
    for p in params:
        if isinstance(p, TyperOption) and p.is_flag and p.metavar is None:
            p.metavar = ""  # typer shows the metavar in place of the type; empty = nothing
        elif isinstance(p, TyperArgument) and p.metavar is None:
            p.metavar = (p.name or "").upper()
    return params


class _PlainHelp:
    """Help in click's plain layout, which wraps long words at any width (typer's rich tables cut
    them with "…" at 80 columns), and flags rendered the classic way (:func:`_tidy_params`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rich_markup_mode = None

    def get_short_help_str(self, limit: int = 45) -> str:
        """The first sentence whole, wrapped in the command list (click cuts it with "...")."""
        return super().get_short_help_str(limit=400)

    def get_params(self, ctx: Any) -> list:
        return _tidy_params(super().get_params(ctx))


def _given_value(args: list[str], param: Any) -> str | None:
    """The text given for ``param`` on the command line (``--flag VALUE`` or ``--flag=VALUE``)."""
    for opt in [*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())]:
        for i, a in enumerate(args):
            if a == opt and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(opt + "="):
                return a[len(opt) + 1:]
    return None


def _expected(param: Any, message: str) -> str:
    """What ``param`` takes, in the words of the project's messages (a number, a whole number, one of
    its choices); else the parser's own message."""
    ptype = getattr(param, "type", None)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    choices = getattr(ptype, "choices", None)
    if choices is None and isinstance(annotation, type) and issubclass(annotation, Enum):
        choices = [m.value for m in annotation]
    if choices:
        return "one of " + ", ".join(str(getattr(c, "value", c)) for c in choices)
    kind = getattr(ptype, "name", None) or {float: "float", int: "integer"}.get(annotation)
    words = {"float": "a number, e.g. 0.5", "integer": "a whole number, e.g. 3"}
    return words.get(kind) or (message[:1].lower() + message[1:]).rstrip(".")


def usage_line(exc: Any, args: list[str], ctx: Any) -> str:
    """One line for what the parser refused: a bad value as ``--flag='VALUE' is invalid: expected
    …`` (like every other bad value, docs/reliability.md), anything else (a missing option, an
    unknown one) as the parser says it; both point to the command's ``--help``."""
    names, c = [], ctx
    while c is not None and c.parent is not None:  # the root's name is how Python was started: say ours
        names.insert(0, c.info_name)
        c = c.parent
    help_hint = f"See {' '.join(['steerformer', *names])} --help."
    param = getattr(exc, "param", None)
    if isinstance(exc, click_exceptions.BadParameter) and not isinstance(exc, click_exceptions.MissingParameter) \
            and param is not None:
        flag = next((o for o in param.opts if o.startswith("--")), None) or (param.name or "").upper()
        value = _given_value(args, param)
        expected = _expected(param, exc.message)
        if value is None:
            return f"{flag} is invalid: expected {expected}. {help_hint}"
        return str(bad_argument(flag, value, expected, help_hint))
    return f"{exc.format_message().rstrip('.')}. {help_hint}"


class SteerformerCommand(_PlainHelp, TyperCommand):
    """Every steerformer command: plain help, classic flags and usage line (see :func:`_tidy_params`);
    a value its parser refuses is one ``error:`` line, exit 2 (:func:`usage_line`), not the usage box."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        rv = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if isinstance(p, TyperArgument):
                name = (p.metavar or (p.name or "").upper()) + ("..." if p.nargs != 1 else "")
                rv.append(name if p.required else f"[{name}]")
        return rv

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)
        try:
            return super().parse_args(ctx, args)
        except click_exceptions.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError" or ctx.resilient_parsing:
                raise  # the help itself, or shell completion
            typer.echo(f"error: {usage_line(exc, given, ctx)}", err=True)
            raise typer.Exit(code=2) from None


class SteerformerGroup(_PlainHelp, TyperGroup):
    """The top-level ``steerformer`` group, rendered like its commands."""


class _App(typer.Typer):
    """``typer.Typer`` whose commands default to :class:`SteerformerCommand`."""

    def command(self, *args: Any, cls: Optional[type] = None, **kwargs: Any):  # type: ignore[override]
        return super().command(*args, cls=cls or SteerformerCommand, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The console script: run the command, then leave without the interpreter's teardown.

        Tearing down torch and transformers (thousands of modules and objects collected one by
        one) takes about 2 s after a model was loaded, with nothing left to do: every output is
        written atomically and closed before the command returns. So once the command has
        finished, the streams are flushed, the ``atexit`` handlers run (logging, a Ray or Dask
        executor's shutdown) and the process exits with the command's code. Not taken while a
        non-daemon thread still runs (the normal exit waits for it), nor in-process (typer's
        CliRunner invokes the command, not this)."""
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as done:
            code = done.code
            if not isinstance(code, (int, type(None))) or _other_threads_alive():
                raise
        _leave(code or 0)
        return None  # unreachable


def _other_threads_alive() -> bool:
    return any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread())


def _leave(code: int) -> None:
    atexit._run_exitfuncs()  # what the interpreter would run first: logging's flush, executors' shutdown
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (steerformer ... | head): nothing more to say
            stream.flush()
    os._exit(code)


app = _App(name="steerformer", cls=SteerformerGroup, no_args_is_help=True, add_completion=True,
           pretty_exceptions_enable=False,
           help="See, measure and steer how tokens move through a transformer's layers.\n\n"
                "Example: steerformer analyze sentence-transformers/all-MiniLM-L6-v2 --spectra-only")


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"steerformer {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
