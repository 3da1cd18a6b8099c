"""An empty layer list is refused, not read as "all layers" (docs/reliability.md): leaving the flag
out means all layers, ``--layers ''`` is almost always a shell variable that came out empty."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from ..models import make_model

runner = CliRunner()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt") / "model"
    make_model("gpt2", dtype=torch.float32).save_pretrained(d)
    return d


@pytest.mark.parametrize("command, flag", [
    ("analyze", "--layers"), ("sweep", "--layers"), ("steer", "--ablate-layers"),
])
@pytest.mark.parametrize("spec", ["", " ", " , "], ids=["empty", "blank", "only-a-comma"])
def test_an_empty_layer_list_is_refused_before_loading(ckpt, tmp_path, command, flag, spec) -> None:
    from steerformer_cli.main import app

    args = {"analyze": ["analyze", str(ckpt), "--spectra-only", "--no-plots", "--out", str(tmp_path / "o")],
            "sweep": ["sweep", "--models", str(ckpt), "--out", str(tmp_path / "o")],
            "steer": ["steer", str(ckpt), "--mode", "ablate", "--eigvec", "0", "--out", str(tmp_path / "o")]}[command]
    res = runner.invoke(app, [*args, flag, spec])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(f"error: {flag}=") and ("at least one layer" in last or "comma-separated" in last), last
    assert "Loading weights" not in res.output
    assert not (tmp_path / "o").exists()


def test_ablate_layers_without_ablate_mode_is_refused(ckpt) -> None:
    from steerformer_cli.main import app

    res = runner.invoke(app, ["steer", str(ckpt), "--eigvec", "0", "--gain", "1", "--ablate-layers", "0"])
    assert res.exit_code == 2 and "--ablate-layers='0'" in res.output and "--mode ablate" in res.output, res.output


def test_leaving_the_flag_out_still_means_all_layers(ckpt, tmp_path) -> None:
    from steerformer_cli.main import app

    res = runner.invoke(app, ["analyze", str(ckpt), "--spectra-only", "--no-plots", "--json", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    import json

    assert [row["layer"] for row in json.loads((tmp_path / "o" / "report.json").read_text())["layers"]] == [0, 1]
