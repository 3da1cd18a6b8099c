"""Every bad value is one ``error:`` line that names the flag, the value and what would work —
also a value the command-line parser itself refuses (a word for a number, a choice it does not
offer; click's usage box before), a coefficient that is not finite (it named the library's
``coeff``), and a KL budget no edit fits (it named the option twice and no value)."""

from __future__ import annotations

import pytest

from steerformer.errors import InvalidArgumentError

from ..conftest import run_cli


def one_line(res) -> str:
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


@pytest.mark.parametrize("args,words", [
    (["steer", "MODEL", "--min-state-cosine", "abc"], ["--min-state-cosine='abc' is invalid: expected a number"]),
    (["steer", "MODEL", "--positions", "best"], ["--positions='best' is invalid: expected one of skip-first, all"]),
    (["evaluate", "MODEL", "--token", "x", "--out", "o", "--max-new-tokens", "1e3"],
     ["--max-new-tokens='1e3' is invalid: expected a whole number"]),
    (["steer", "MODEL", "--layer=1.5"], ["--layer='1.5' is invalid: expected a whole number"]),
    (["evaluate", "MODEL", "--out", "o"], ["--token", "steerformer evaluate --help"]),
    (["steer", "MODEL", "--no-such-flag"], ["--no-such-flag", "steerformer steer --help"]),
], ids=["word-for-a-number", "choice-not-offered", "float-for-a-count", "fraction-for-a-layer", "missing-option",
        "unknown-option"])
def test_a_value_the_parser_refuses_is_one_error_line(args, words) -> None:
    line = one_line(run_cli(args))
    for w in words:
        assert w in line, line
    assert "Usage:" not in line and "Try " not in line


def test_a_coefficient_that_is_not_finite_names_the_flag_before_loading(tmp_path) -> None:
    line = one_line(run_cli(["evaluate", tmp_path / "no-model", "--token", "x", "--coeffs", "0.1,inf",
                             "--out", tmp_path / "o"]))
    assert line.startswith("error: --coeffs='0.1,inf' is invalid: expected") and "finite" in line, line


def test_an_unreachable_kl_budget_says_which_budget_would_work() -> None:
    from steerformer.steering.algebra import search_gain

    with pytest.raises(InvalidArgumentError) as err:
        search_gain(lambda gain: (0.0123, None), 1e-9, scale=1.0)
    msg = str(err.value)
    assert msg.startswith("max_kl=1e-09 is invalid") and "0.0123" in msg, msg
    assert "max_kl=0.013 or more" in msg and msg.count("max_kl") == 2, msg  # the value that works, named once more


def test_the_cli_names_the_budget_flag_with_the_value_that_works() -> None:
    from steerformer_cli._common import cli_message
    from steerformer_cli.main import app
    from typer.main import get_command

    from steerformer.steering.algebra import search_gain

    cmd = get_command(app).commands["steer"]
    with cmd.make_context("steer", ["MODEL"]) as ctx, ctx.scope():
        try:
            search_gain(lambda gain: (0.0123, None), 1e-9, scale=1.0)
        except InvalidArgumentError as exc:
            line = cli_message(exc)
    assert line.startswith("--max-kl=1e-09 is invalid") and line.endswith("Use --max-kl=0.013 or more."), line
    assert "(--max-kl)" not in line
