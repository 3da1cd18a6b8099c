"""`steerformer analyze` through typer's CliRunner on the bundled MiniLM."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from steerformer import layer_matrices
from steerformer_cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def minilm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm")
    res = runner.invoke(app, ["analyze", "sentence-transformers/all-MiniLM-L6-v2", "--out", str(out), "--json",
                              "--spectra-only"])  # statistics have their own CLI tests
    assert res.exit_code == 0, res.output
    return out, res


def test_json_report_matches_python_api(minilm_run) -> None:
    out, res = minilm_run
    report = json.loads(res.stdout)
    assert report == json.loads((out / "report.json").read_text())
    assert report["meta"]["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert report["meta"]["config"]["d_model"] == 384
    assert [r["layer"] for r in report["layers"]] == list(range(6))
    # Independent check: eigenvalues of W_O·V by numpy, ordered by real part.
    F = layer_matrices("sentence-transformers/all-MiniLM-L6-v2").numpy()
    for r, Fk in zip(report["layers"], F):
        ev = np.linalg.eigvals(Fk)
        top = ev[np.argsort(-ev.real)][0]
        assert r["lambda1"][0] == pytest.approx(top.real, rel=1e-9)
        assert abs(r["lambda1"][1]) == pytest.approx(abs(top.imag), abs=1e-9)
        assert r["spectral_radius"] == pytest.approx(np.abs(ev).max(), rel=1e-9)
        assert r["case"] in (1, 2, 3)
    npz = np.load(out / "eigenvalues.npz")
    assert npz["eigenvalues"].shape == (6, 384)
    for name in ("eigenvalues_complex_plane.png", "top5_real_parts.png", "real_part_histogram.png", "layers.csv"):
        assert (out / name).stat().st_size > 0


def test_table_and_layers_option(tmp_path) -> None:
    res = runner.invoke(app, ["analyze", "minilm", "--layers", "0,4-5", "--no-plots", "--spectra-only",
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "λ1" in res.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["layer"] for r in report["layers"]] == [0, 4, 5]
    assert not (tmp_path / "top5_real_parts.png").exists()


@pytest.mark.parametrize("args, words", [
    (["analyze", "minilm", "--layers", "9"], ["layers=[9]", "6 layers"]),
    (["analyze", "minilm", "--layers", "a-b"], ["--layers", "'a-b'"]),
    (["analyze", "nope-org/nope-model"], ["nope-org/nope-model", "local checkpoint directory"]),
    (["analyze", "minilm", "--eig-dtype", "float16"], ["--eig-dtype", "float16"]),
])
def test_bad_input_is_one_clean_line(args, words, tmp_path) -> None:
    res = runner.invoke(app, args + ["--out", str(tmp_path), "--no-plots"])
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    for w in words:
        assert w in res.output
