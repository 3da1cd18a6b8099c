"""Every command's --help reads at 80 columns: wrapped, never cut ("…" or "..."), flags without a
value type, and every model argument names the bundled aliases."""

from __future__ import annotations

import click
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from steerformer_cli.main import app

runner = CliRunner()


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    yield prefix
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))
        else:
            yield prefix + (name,)


COMMANDS = list(_commands(get_command(app)))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "steerformer")
def test_help_wraps_at_80_columns_and_shows_flags_as_flags(path) -> None:
    res = runner.invoke(app, [*path, "--help"], terminal_width=80)
    assert res.exit_code == 0, res.output
    out = res.output
    cut = [ln for ln in out.splitlines()  # a cut line ends in "..." or "…" (not the usage's RUNS...)
           if "…" in ln or (ln.rstrip().endswith("...") and not ln.startswith("Usage:"))]
    assert not cut, out
    assert "<bool>" not in out, out
    assert "{" not in out.split("\n", 1)[0], out  # the usage line: MODEL, not {model}
    too_wide = [ln for ln in out.splitlines() if len(ln) > 80]
    assert not too_wide, too_wide


@pytest.mark.parametrize("path", [p for p in COMMANDS if p and p[-1] in
                                  ("analyze", "steer", "evaluate", "collapse", "make", "sweep")],
                         ids=" ".join)
def test_every_model_argument_lists_the_bundled_aliases(path) -> None:
    out = runner.invoke(app, [*path, "--help"], terminal_width=80).output
    section = out.split("Arguments:", 1)[1].split("Options:", 1)[0]
    assert "'minilm'" in section and "'smollm2'" in section, section
