"""`steerformer collapse` / `plot-collapse` end to end on a tiny saved checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from steerformer_cli.main import app

from tests.models import saved_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("tiny_gpt2_lm"), "gpt2")


def test_collapse_writes_results_figure_and_decoding(checkpoint, tmp_path) -> None:
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["collapse", str(checkpoint), "--passes", "3", "--n-prompts", "3", "--length", "8",
                                 "--out", str(out), "--decode-passes", "1,2", "--decode-tokens", "3"])
    assert r.exit_code == 0, r.output
    assert "E mean" in r.output and "greedy continuation" in r.output
    doc = json.loads((out / "collapse.json").read_text())
    assert doc["n_passes"] == 3 and doc["n_blocks"] == 2 and len(doc["summary"]["e"]["mean"]) == 1 + 3 * 2
    with np.load(out / "collapse.npz") as z:
        assert z["e"].shape == (3, 2, 3)
        np.testing.assert_allclose(z["e"].mean(-1).ravel(), doc["summary"]["e"]["mean"][1:])
    dec = json.loads((out / "decode.json").read_text())
    assert sorted(dec["continuations"]) == ["1", "2"] and len(dec["continuations"]["1"]) == 3
    assert (out / "collapse.png").stat().st_size > 0

    r2 = CliRunner().invoke(app, ["collapse", str(checkpoint), "--passes", "2", "--n-prompts", "3", "--length", "8",
                                  "--out", str(tmp_path / "noffn"), "--no-ffn", "--no-decode"])
    assert r2.exit_code == 0, r2.output
    fig = tmp_path / "both.png"
    r3 = CliRunner().invoke(app, ["plot-collapse", str(out), str(tmp_path / "noffn"), "--out", str(fig),
                                  "--labels", "full,no FFN"])
    assert r3.exit_code == 0, r3.output
    assert fig.stat().st_size > 0


def test_collapse_bad_input_is_one_line_and_exit_2(checkpoint, tmp_path) -> None:
    r = CliRunner().invoke(app, ["collapse", str(checkpoint), "--passes", "0", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "passes=0" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["collapse", str(checkpoint), "--length", "100", "--passes", "1",
                                 "--out", str(tmp_path / "y"), "--no-decode"])
    assert r.exit_code == 2 and "at most 64" in r.output
