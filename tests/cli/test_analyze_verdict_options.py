"""`steerformer analyze` with the test's options: --ci, --bootstrap, --null-draws, --alpha,
--correction, --seeds reach report.json, the CSV and the printed verdicts; bad values are one line
naming the flag, exit 2."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from typer.testing import CliRunner

from steerformer_cli.main import app
from tests.models import make_model

runner = CliRunner()


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    make_model("bert", dtype=torch.float32, hidden_size=32, num_attention_heads=4).save_pretrained(d)
    return d


def test_options_reach_the_report_the_csv_and_the_verdicts(bert_dir, tmp_path) -> None:
    res = runner.invoke(app, ["analyze", str(bert_dir), "--out", str(tmp_path), "--n-prompts", "6", "--n-tokens", "4",
                              "--ci", "0.9", "--bootstrap", "200", "--null-draws", "19", "--alpha", "0.1",
                              "--correction", "holm", "--seeds", "2", "--no-full-model", "--no-plots"])
    assert res.exit_code == 0, res.output
    assert "Holm-adjusted p < 0.1 for Δρ and P against 19 random-weight draws" in res.stdout
    assert "over token seeds 0–1" in res.stdout
    pm = json.loads((tmp_path / "report.json").read_text())["power_method"]
    assert {k: pm["options"][k] for k in ("ci", "bootstrap", "null_draws", "alpha", "correction", "seeds")} == \
        {"ci": 0.9, "bootstrap": 200, "null_draws": 19, "alpha": 0.1, "correction": "holm", "seeds": 2}
    ctl = pm["controlled"]
    assert ctl["meta"]["ci"]["level"] == 0.9 and ctl["meta"]["test"]["smallest_p"] == pytest.approx(1 / 20)
    rows = list(csv.DictReader((tmp_path / "alignment.csv").open()))
    for r, j in zip(rows, ctl["layers"]):
        assert float(r["P_lo"]) == pytest.approx(j["P_lo"]) and float(r["p_delta_adjusted"]) == pytest.approx(
            j["p_delta_adjusted"])
        assert r["unstable"] in ("True", "False")


@pytest.mark.parametrize("extra, flag", [(["--ci", "1.5"], "--ci=1.5"), (["--alpha", "0"], "--alpha=0"),
                                         (["--seeds", "0"], "--seeds=0"), (["--bootstrap", "5"], "--bootstrap=5")])
def test_bad_values_are_one_line_naming_the_flag(bert_dir, tmp_path, extra, flag) -> None:
    res = runner.invoke(app, ["analyze", str(bert_dir), "--out", str(tmp_path / "o"), *extra])
    assert res.exit_code == 2 and flag in res.output, res.output
    assert not (tmp_path / "o").exists()
