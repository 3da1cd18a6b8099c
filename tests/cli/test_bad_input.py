"""A user's mistake on the command line is one clear line naming the flag (exit 2), and
is caught before anything expensive (loading a model, eigen-decompositions) runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.models import saved_model

runner = CliRunner()


def _cli(args):
    from steerformer_cli.main import app

    res = runner.invoke(app, args)
    assert "Traceback" not in res.output, res.output
    return res


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("cli") / "model", "gpt2")


@pytest.mark.parametrize("spec, words", [
    ("1-0", "is empty"), ("0-99999999999", "a + 100000"), ("-1-1", "negative indices singly"),
    ("0,0,0", "layer 0 is named more than once"), ("-1,1", "layer 1 is named more than once"),
], ids=["layers-empty-range", "layers-huge-range", "layers-negative-range", "layers-duplicates",
        "layers-negative-alias"])
def test_layers_parsing(base, tmp_path, spec, words) -> None:
    # duplicates are refused, not de-duplicated: a repeated layer is a typo more often than a wish
    res = _cli(["analyze", str(base), "--layers", spec, "--spectra-only", "--no-plots", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and ("--layers=" in res.output or "layers=" in res.output)
    assert words in res.output, res.output


@pytest.mark.parametrize("device, words", [
    ("quantum", "a torch device such as cpu"), ("cuda:99", "cuda"),
], ids=["device-quantum", "device-unavailable-cuda"])
@pytest.mark.parametrize("cmd", ["analyze", "collapse"])
def test_unavailable_device_is_refused_before_loading(tmp_path, cmd, device, words) -> None:
    res = _cli([cmd, "no/such-model", "--device", device, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and f"--device='{device}'" in res.output and words in res.output, res.output


def test_device_check_in_the_library(base) -> None:
    from steerformer.errors import InvalidArgumentError
    from steerformer.loading import load_model

    with pytest.raises(InvalidArgumentError, match="device='quantum'"):
        load_model(base, device="quantum")


@pytest.mark.parametrize("args, words", [
    (["fig13a", "--t1", "inf"], "--t1=inf"),
    (["fig13b", "--dt", "nan"], "--dt=nan"),
    (["fig13a", "--t1", "-1"], "--t1=-1.0"),
    (["5.1.1", "--runs", "100000000"], "GiB"),
], ids=["simulate-t1-inf", "simulate-dt-nan", "simulate-t1-negative", "simulate-runs-1e8-memory-estimate"])
def test_simulate_extreme_numbers(args, words) -> None:
    res = _cli(["simulate", *args])
    assert res.exit_code == 2 and words in res.output, res.output


def test_steer_strength_that_overflows_the_weights(base) -> None:
    res = _cli(["steer", str(base), "--eigvec", "0", "--strength", "1e308"])
    assert res.exit_code == 2 and "strength=1e+308" in res.output and "overflows" in res.output, res.output


def test_analyze_binary_prompts_file_is_refused_before_the_work(tmp_path) -> None:
    f = tmp_path / "prompts.txt"
    f.write_bytes(bytes(range(256)) * 4)
    res = _cli(["analyze", "no/such-model", "--prompts", str(f), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "binary" in res.output and "prompts=" in res.output, res.output


def _npy(kind: str, tmp_path: Path) -> Path:
    p = tmp_path / "u.npy"
    if kind == "text":
        p.write_text("0.1 0.2 0.3\n")
    elif kind == "npz":
        np.savez(tmp_path / "u.npz", u=np.ones(64))
        (tmp_path / "u.npz").rename(p)
    elif kind == "complex":
        np.save(p, np.ones(64) * (1 + 1j))
    return p


@pytest.mark.parametrize("kind, words", [
    ("text", "magic bytes"), ("npz", "an .npz archive"), ("complex", "a real vector"),
], ids=["text-file-named-npy", "npz-renamed-npy", "complex-npy"])
def test_direction_file_kinds(base, tmp_path, kind, words) -> None:
    res = _cli(["steer", str(base), "--direction", str(_npy(kind, tmp_path)), "--strength", "1"])
    assert res.exit_code == 2 and words in res.output and "pickled" not in res.output, res.output
