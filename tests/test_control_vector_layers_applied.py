"""A control vector's direction.N belongs to block N: steering a layer it does not hold is refused
in one line (a file holding only direction.2 used to be applied at layer 1, because a one-layer
direction answers for every layer), and a layer number no model has (20 digits) is refused when
the file is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("gguf")

from tests.formats.test_control_vector_files import _write_raw  # noqa: E402
from tests.models import saved_model  # noqa: E402


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("gpt2") / "base", "gpt2-base")


def _steer(*args):
    from steerformer_cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _one_line(res, *words) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_a_control_vector_is_not_applied_at_a_layer_it_does_not_hold(gpt2, tmp_path) -> None:
    cv = _write_raw(tmp_path / "two.gguf", {"direction.2": np.ones(64, np.float32)})
    res = _steer("steer", gpt2, "--direction", cv, "--layer", "1", "--gain", "1", "--solve", "exact",
                 "--out", tmp_path / "o")
    _one_line(res, "--direction", "direction.1", "direction.2")
    assert not (tmp_path / "o").exists()


def test_a_control_vector_still_steers_the_layer_it_holds(gpt2, tmp_path) -> None:
    cv = _write_raw(tmp_path / "one.gguf", {"direction.1": np.ones(64, np.float32)})
    res = _steer("steer", gpt2, "--direction", cv, "--layer", "1", "--gain", "1", "--solve", "exact",
                 "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output


def test_a_twenty_digit_layer_is_refused_when_read(gpt2, tmp_path) -> None:
    cv = _write_raw(tmp_path / "huge.gguf", {"direction.12345678901234567890": np.ones(64, np.float32)})
    res = _steer("steer", gpt2, "--direction", cv, "--layer", "1", "--gain", "1", "--solve", "exact",
                 "--out", tmp_path / "o")
    _one_line(res, "--direction", "layer number")


def test_more_ablation_directions_than_dimensions_is_refused(gpt2, tmp_path) -> None:
    np.save(tmp_path / "many.npy", np.random.default_rng(0).normal(size=(65, 64)))
    res = _steer("steer", gpt2, "--direction", tmp_path / "many.npy", "--method", "ablation", "--out", tmp_path / "o")
    _one_line(res, "--direction", "at most 64 directions")
    assert not (tmp_path / "o").exists()


def test_a_direction_is_never_saved_inside_the_checkpoint_it_was_made_from(gpt2, tmp_path) -> None:
    import torch

    from steerformer.errors import InvalidArgumentError
    from steerformer.steering import Direction

    d = Direction({1: torch.ones(1, 64, dtype=torch.float64)}, model_id=str(gpt2), method="test")
    with pytest.raises(InvalidArgumentError, match="input checkpoint"):
        d.save(gpt2 / "dir")
    assert not (gpt2 / "dir").exists()
    d.save(tmp_path / "dir")  # anywhere else is fine
