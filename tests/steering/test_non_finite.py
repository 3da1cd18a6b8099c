"""Steering refuses non-finite results (the model restored, nothing saved) and normalizes
directions whose norm overflows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from steerformer.errors import SteerformerError
from steerformer.steering import steer, steering_of
from steerformer_cli.main import app

from tests.conftest import is_progress_line, unit_vector
from tests.models import make_model


runner = CliRunner()


def _one_line_exit2(res) -> None:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.replace("\r", "\n").splitlines() if ln.strip() and not is_progress_line(ln)]
    assert "Traceback" not in res.output and len(lines) == 1 and lines[0].startswith("error:"), res.output


# ---- steer refuses non-finite results ---------------------------------------------------------------
@pytest.mark.parametrize("gain,report,what", [(1e30, True, "model outputs"), (1e45, False, "weights")],
                         ids=["steer-huge-gain-nan-outputs", "steer-huge-gain-inf-weights"])
def test_steer_huge_gain_is_refused_and_the_model_restored(gain: float, report: bool, what: str) -> None:
    model = make_model("gpt2", dtype=torch.float32)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    with pytest.raises(SteerformerError, match=f"non-finite {what}"):
        steer(model, unit_vector(64, 1), gain=gain, solve="exact", report=report)
    assert all(torch.equal(v, before[k]) for k, v in model.named_parameters())
    assert steering_of(model) is None
    # a steered model steered again with a huge gain keeps its first edit, nothing else
    steer(model, unit_vector(64, 2), gain=1.0, solve="exact", report=False)
    once = {k: v.detach().clone() for k, v in model.named_parameters()}
    with pytest.raises(SteerformerError, match="non-finite"):
        steer(model, unit_vector(64, 1), gain=gain, solve="exact", report=report)
    assert all(torch.equal(v, once[k]) for k, v in model.named_parameters())
    assert len(steering_of(model).records) == 1


def test_steer_strength_1e308_is_one_clear_error() -> None:  # id: steer-strength-1e308 (was ArpackError)
    model = make_model("gpt2", dtype=torch.float32)
    with pytest.raises(SteerformerError, match=r"strength=1e\+308"):
        steer(model, unit_vector(64, 1), strength=1e308, solve="exact")
    assert steering_of(model) is None


def test_cli_steer_huge_gain_saves_nothing(tmp_path: Path) -> None:
    make_model("gpt2", dtype=torch.float32).save_pretrained(tmp_path / "base")
    np.save(tmp_path / "u.npy", unit_vector(64, 1).numpy())
    res = runner.invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(tmp_path / "u.npy"),
                              "--gain", "1e30", "--solve", "exact", "--out", str(tmp_path / "out")])
    _one_line_exit2(res)
    assert "non-finite" in res.output and not (tmp_path / "out").exists()


def test_steer_direction_entries_1e308_normalize_without_overflow() -> None:
    model = make_model("bert", dtype=torch.float64)
    before = model.encoder.layer[1].attention.output.dense.weight.detach().clone()
    raw = unit_vector(64, 4).numpy() * 1e308 / np.abs(unit_vector(64, 4).numpy()).max()  # max entry 1e308
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.linalg.norm(raw))  # the naive norm overflows
    rec = steer(model, raw, gain=1.0, solve="exact", report=False)
    u = np.asarray(rec.direction)
    assert np.isfinite(u).all() and abs(np.linalg.norm(u) - 1) < 1e-12
    assert np.allclose(u, unit_vector(64, 4).numpy(), atol=1e-12)
    assert not torch.equal(model.encoder.layer[1].attention.output.dense.weight, before)
