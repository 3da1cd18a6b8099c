"""Chains on disk: steering a steered checkpoint appends to its chain and keeps the
true originals; unsteer (from disk, or in memory after reload) restores them bit for bit; verify
checks the whole chain; the card lists every edit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModel, GPT2LMHeadModel

import steerformer as sf
from steerformer.steering import (
    load_for_steering, save_steered, steer, steering_of, unsteer, unsteer_checkpoint, verify_checkpoint,
)

from tests.conftest import unit_vector
from tests.models import make_model


def _sd(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_steer_save_steer_save_unsteer_restores_the_true_original(tmp_path: Path, family: str) -> None:
    model = make_model(family, dtype=torch.float32)
    original = _sd(model)
    model.save_pretrained(tmp_path / "base")
    m1 = load_for_steering(tmp_path / "base")
    steer(m1, unit_vector(64, 1), gain=3.0, solve="exact", report=False)  # last layer
    s1 = save_steered(m1, tmp_path / "s1")
    m2 = load_for_steering(s1)  # chain re-attached
    assert len(steering_of(m2).records) == 1
    steer(m2, unit_vector(64, 2), gain=2.0, solve="exact", layer=-1, report=False)  # same module again
    steer(m2, unit_vector(64, 3), gain=1.0, solve="exact", layer=0, report=False)
    steered2 = _sd(m2)
    s2 = save_steered(m2, tmp_path / "s2")
    # from disk: the TRUE original, not s1's weights
    back = AutoModel.from_pretrained(unsteer_checkpoint(s2, tmp_path / "orig")) if family == "bert" else \
        GPT2LMHeadModel.from_pretrained(unsteer_checkpoint(s2, tmp_path / "orig"))
    assert _same(_sd(back), original)
    # after reload with sf.load_model the chain is attached: full and partial undo in memory
    m3 = load_for_steering(s2)
    assert _same(_sd(m3), steered2) and len(steering_of(m3).records) == 3
    unsteer(m3, last=2)
    assert _same(_sd(m3), _sd(load_for_steering(s1)))
    unsteer(m3)
    assert _same(_sd(m3), original)
    plain = sf.load_model(s2)
    assert steering_of(plain) is not None
    unsteer(plain)
    base_sd = _sd(sf.load_model(tmp_path / "base"))
    assert _same(_sd(plain), base_sd)
    # the whole chain verifies; the card lists every edit
    res = verify_checkpoint(s2)
    assert res["ok"] and res["records"] == 3, res
    card = (s2 / "README.md").read_text()
    assert card.count("| layer (execution) |") == 3
    # unsteer --last 1 from disk leaves a 2-edit chain that still verifies
    partial = unsteer_checkpoint(s2, tmp_path / "p", last=1)
    assert verify_checkpoint(partial)["ok"]
    assert len(steering_of(load_for_steering(partial)).records) == 2


def test_cli_chain_steer_twice_then_unsteer(tmp_path: Path) -> None:
    import numpy as np
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    model = make_model("bert", dtype=torch.float32)
    model.save_pretrained(tmp_path / "base")
    np.save(tmp_path / "u.npy", unit_vector(64, 1).numpy())
    np.save(tmp_path / "v.npy", unit_vector(64, 2).numpy())
    r = CliRunner()
    for src, vec, out in (("base", "u", "s1"), ("s1", "v", "s2")):
        res = r.invoke(app, ["steer", str(tmp_path / src), "--direction", str(tmp_path / f"{vec}.npy"), "--gain", "2",
                             "--solve", "exact", "--out", str(tmp_path / out)])
        assert res.exit_code == 0, res.output
    res = r.invoke(app, ["verify", str(tmp_path / "s2")])
    assert res.exit_code == 0, res.output
    res = r.invoke(app, ["unsteer", str(tmp_path / "s2"), "--out", str(tmp_path / "s1b"), "--last", "1"])
    assert res.exit_code == 0, res.output
    one = AutoModel.from_pretrained(tmp_path / "s1").state_dict()
    back = AutoModel.from_pretrained(tmp_path / "s1b").state_dict()
    assert all(torch.equal(one[k], back[k]) for k in one)
    res = r.invoke(app, ["unsteer", str(tmp_path / "s2"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    a = AutoModel.from_pretrained(tmp_path / "base").state_dict()
    b = AutoModel.from_pretrained(tmp_path / "o").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
