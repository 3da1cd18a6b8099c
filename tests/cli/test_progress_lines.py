"""No silent phase: analyze shows a bar or a line for the null draws, the stability seeds and the
figures; steer says what it loads, what it runs and where it saves; collapse says what it loads;
--quiet silences all of it (stderr only: stdout keeps the results)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from steerformer_cli.main import app
from tests.models import saved_model

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("m") / "tiny-gpt2", "gpt2")


def _stderr(res) -> str:
    return res.stderr if hasattr(res, "stderr") else res.output


def test_analyze_shows_each_statistics_phase_and_quiet_silences_them(tiny, tmp_path) -> None:
    args = ["analyze", str(tiny), "--n-prompts", "4", "--n-tokens", "4", "--null-draws", "3", "--seeds", "2",
            "--bootstrap", "100"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    err = _stderr(res)
    for phase in ("eig per layer", "null model (3 draws)", "stability over 1 more seeds", "seed 1: null draws",
                  "writing report.json, CSV, arrays and figures"):
        assert phase in err, (phase, err[-2000:])
    quiet = runner.invoke(app, [*args, "--out", str(tmp_path / "b"), "--quiet"])
    assert quiet.exit_code == 0, quiet.output
    assert _stderr(quiet).strip() == ""
    assert "report written to" in quiet.stdout


def test_steer_says_each_phase_and_quiet_silences_them(tiny, tmp_path) -> None:
    args = ["steer", str(tiny), "--eigvec", "0", "--layer", "1"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    err = _stderr(res)
    assert f"loaded {tiny}" in err
    assert "steering: probe continuations, layer 1, then the gain search within the KL budget" in err
    assert f"saving to {tmp_path / 's'} ..." in err
    quiet = runner.invoke(app, [*args, "--out", str(tmp_path / "q"), "--quiet"])
    assert quiet.exit_code == 0, quiet.output
    assert _stderr(quiet).strip() == ""


def test_collapse_says_what_it_loads_and_quiet_silences_it(tiny, tmp_path) -> None:
    args = ["collapse", str(tiny), "--passes", "2", "--n-prompts", "2", "--length", "4", "--no-decode"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert f"loaded {tiny}" in _stderr(res) and "collapse" in _stderr(res)
    quiet = runner.invoke(app, [*args, "--out", str(tmp_path / "d"), "--quiet"])
    assert quiet.exit_code == 0, quiet.output
    assert _stderr(quiet).strip() == ""
