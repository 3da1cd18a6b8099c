"""`steerformer analyze` with the power-method statistics, on a saved tiny ALBERT and MiniLM."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from steerformer_cli.main import app

from tests.models import make_model, saved_model

runner = CliRunner()




@pytest.fixture(scope="module")
def albert_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("albert"), "albert")


def test_shared_weight_model_gets_prolonged_run_and_every_plotted_number(albert_dir, tmp_path) -> None:
    res = runner.invoke(app, ["analyze", str(albert_dir), "--out", str(tmp_path), "--n-prompts", "8",
                              "--n-tokens", "4", "--prolong", "5", "--seed", "3"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln.strip().startswith("layer ") and "→" in ln]
    assert len(lines) == 4 and all("power-method step" in ln for ln in lines)
    assert "of 4 layers act as a power-method step" in res.stdout
    assert "full model skipped" in res.stdout  # a random model saved without tokenizer
    report = json.loads((tmp_path / "report.json").read_text())
    pm = report["power_method"]
    assert pm["options"]["prolong"] == 5 and len(pm["prolonged"]["layers"]) == 20
    rows = list(csv.DictReader((tmp_path / "alignment.csv").open()))
    assert [r["variant"] for r in rows] == ["controlled"] * 4 + ["prolonged"] * 20
    # CSV and JSON carry the same numbers.
    for r, j in zip(rows, pm["controlled"]["layers"]):
        assert float(r["delta_rho_mean"]) == pytest.approx(j["delta_rho_mean"], rel=1e-12)
        assert float(r["baseline_P"]) == pytest.approx(j["baseline_P"], rel=1e-12)
    for name in ("power_method.png", "cumulative.png", "histograms_last_layer.png", "token_trajectories.png",
                 "prolonged_run.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_spectra_only_skips_statistics(albert_dir, tmp_path) -> None:
    res = runner.invoke(app, ["analyze", str(albert_dir), "--out", str(tmp_path), "--spectra-only", "--no-plots"])
    assert res.exit_code == 0, res.output
    assert "power_method" not in json.loads((tmp_path / "report.json").read_text())
    assert not (tmp_path / "alignment.csv").exists()


@pytest.mark.parametrize("extra, words", [
    (["--prolong", "0"], ["--prolong=0", "K >= 1"]),
    (["--n-tokens", "0"], ["--n-tokens=0", "positive"]),
    (["--prompts", "EMPTY"], ["at least one non-blank line"]),
])
def test_bad_statistics_options_are_one_clean_line(extra, words, tmp_path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    extra = [str(empty) if e == "EMPTY" else e for e in extra]
    res = runner.invoke(app, ["analyze", "minilm", "--out", str(tmp_path / "out"), "--no-plots", "--n-prompts", "2"] + extra)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    for w in words:
        assert w in res.output


def test_power_method_stats_on_grouped_albert_skips_full_model_only() -> None:
    from steerformer.stats import power_method_stats

    model = make_model("albert-2groups-inner2")
    rep = power_method_stats(model, n_prompts=4, n_tokens=3, prolong=2)
    assert "inner_group_num" in rep.options["full_model_skipped"]
    assert len(rep.controlled.layers) == 8 and len(rep.prolonged.layers) == 16
    # Execution layers run slots 0,1,0,1,2,3,2,3: the statistics follow the layer ids of the run.
    assert [r["layer"] for r in rep.controlled.layers] == list(range(8))
