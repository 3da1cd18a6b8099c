"""The CLI starts without the heavy libraries, renders flags as flags and validates choices early."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from steerformer_cli.main import app

runner = CliRunner()
HEAVY = ("torch", "transformers", "matplotlib", "scipy")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_import_loads_no_heavy_library() -> None:
    assert _loaded_after("import steerformer_cli.main") == []


def test_package_import_is_lazy_but_names_resolve() -> None:
    assert _loaded_after("import steerformer; steerformer.__version__; steerformer.SteerformerError") == []
    import steerformer as sf

    for name in sf.__all__:  # every advertised name resolves
        assert getattr(sf, name) is not None, name


def test_help_renders_flags_without_a_value_and_usage_without_braces() -> None:
    res = runner.invoke(app, ["analyze", "--help"], terminal_width=200)
    assert res.exit_code == 0
    out = res.output
    assert "{model}" not in out and "MODEL" in out
    assert "<bool>" not in out
    line = next(ln for ln in out.splitlines() if "--no-plots" in ln)
    assert "<" not in line.split("--no-plots")[1].split("Skip")[0]
    # choices are listed
    assert "float64" in out and "float32" in out


@pytest.mark.parametrize("cmd", ["analyze", "collapse", "plot-collapse", "simulate", "steer", "unsteer", "verify"])
def test_every_command_help_has_an_example(cmd) -> None:
    res = runner.invoke(app, [cmd, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert f"Example: steerformer {cmd}" in res.output


def test_version() -> None:
    import steerformer

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.output.strip() == f"steerformer {steerformer.__version__}"


def test_completion_is_on() -> None:
    res = runner.invoke(app, ["--help"], terminal_width=200)
    assert "--install-completion" in res.output


@pytest.mark.parametrize("args, flag", [
    (["steer", "no-such-model-dir", "--measure", "foo"], "--measure"),
    (["steer", "no-such-model-dir", "--solve", "pinv"], "--solve"),
    (["analyze", "no-such-model-dir", "--eig-dtype", "float16"], "--eig-dtype"),
    (["steer", "no-such-model-dir", "--dtype", "int3"], "--dtype"),
    (["collapse", "no-such-model-dir", "--weights", "zeros"], "--weights"),
    (["collapse", "no-such-model-dir", "--dtype", "fp8"], "--dtype"),
    (["plot-collapse", "no-such-run", "--stat", "max"], "--stat"),
])
def test_choices_are_checked_by_the_parser(args, flag) -> None:
    # the model argument does not exist: a parser error (exit 2, naming the flag) proves nothing loaded it
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert flag in res.output
    assert "no-such" not in res.output.replace(" ".join(args), "")


def test_library_error_names_the_flag_in_the_cli_and_the_argument_in_python(tmp_path) -> None:
    from steerformer.errors import InvalidArgumentError
    from steerformer.ode import run_setup

    with pytest.raises(InvalidArgumentError, match=r"^runs=0 is invalid"):
        run_setup("fig13a", runs=0)
    res = runner.invoke(app, ["simulate", "fig13a", "--runs", "0"])
    assert res.exit_code == 2
    assert "error: --runs=0 is invalid" in res.output


def test_every_named_argument_of_a_message_becomes_its_flag() -> None:
    from typer.main import get_command

    from steerformer.errors import bad_argument
    from steerformer_cli._common import cli_message

    err = bad_argument("direction (d.npy)", "array of shape (10,)", "a vector of 384 entries",
                       "direction (d.npy) has 10 entries; give either strength= or gain=, not a direction text")
    steer = get_command(app).commands["steer"]
    with steer.make_context("steer", ["minilm"]) as ctx:
        with ctx:
            msg = cli_message(err)
    assert msg == ("--direction (d.npy)='array of shape (10,)' is invalid: expected a vector of 384 entries. "
                   "--direction (d.npy) has 10 entries; give either --strength= or --gain=, not a direction text")
    assert cli_message(err) == str(err)  # outside a command: the Python names


def test_every_built_in_method_config_imports_without_torch() -> None:
    """A method folder's config.py is what ``steer --help`` reads for the flags: no heavy import."""
    from steerformer.steering.registry import BUILT_IN

    configs = [where for _, where in BUILT_IN.values() if where is not None]
    assert len(configs) >= 3
    code = "; ".join(f"import steerformer.steering{where}" for where in configs)
    assert _loaded_after(code) == []
    assert _loaded_after("from steerformer_cli.main import app\nfrom typer.testing import CliRunner\n"
                         "assert CliRunner().invoke(app, ['steer', '--help']).exit_code == 0") == []
