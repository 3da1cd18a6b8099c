"""An empty layer list is refused, not read as "all layers" (docs/reliability.md): leaving the flag
out means all layers, ``--layers ''`` is almost always a shell variable that came out empty."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("command, flag", [
    ("analyze", "--layers"), ("sweep", "--layers"), ("steer", "--layers"),
])
@pytest.mark.parametrize("spec", ["", " ", " , "], ids=["empty", "blank", "only-a-comma"])
def test_an_empty_layer_list_is_refused_before_loading(tiny_checkpoint, tmp_path, command, flag, spec) -> None:
    d, out = tiny_checkpoint, tmp_path / "o"
    args = {"analyze": ["analyze", d, "--spectra-only", "--no-plots", "--out", out],
            "sweep": ["sweep", "--models", d, "--out", out],
            "steer": ["steer", d, "--method", "ablation", "--eigvec", "0", "--out", out]}[command]
    res = run_cli([*args, flag, spec])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(f"error: {flag}=") and ("at least one layer" in last or "comma-separated" in last), last
    assert "Loading weights" not in res.output
    assert not (tmp_path / "o").exists()


def test_several_layers_with_the_paper_edit_are_refused(tiny_checkpoint) -> None:
    res = run_cli(["steer", tiny_checkpoint, "--eigvec", "0", "--gain", "1", "--layers", "0"])
    assert res.exit_code == 2 and "--layers=[0]" in res.output and "method='ablation'" in res.output, res.output


def test_leaving_the_flag_out_still_means_all_layers(tiny_checkpoint, tmp_path) -> None:
    res = run_cli(["analyze", tiny_checkpoint, "--spectra-only", "--no-plots", "--json", "--out", tmp_path / "o"])
    assert res.exit_code == 0, res.output
    import json

    assert [row["layer"] for row in json.loads((tmp_path / "o" / "report.json").read_text())["layers"]] == [0, 1]
