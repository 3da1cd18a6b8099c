"""Steering away (negative gain) and direction ablation W_O' = (I − s uuᵀ) W_O (docs/math.md §5b),
checked on the real modules' forward outputs through hooks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from steerformer import layer_matrices
from steerformer.errors import InvalidArgumentError
from steerformer.steering import save_steered, steer, unsteer, verify_checkpoint
from steerformer.steering import ablate

from tests.conftest import random_vector
from tests.models import make_model


def _writes(model, ids) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Per layer: (output of the real attention output projection, its bias b_O)."""
    from steerformer import get_adapter

    adapter = get_adapter(model.config)
    base = model.base_model
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for slot in range(len(adapter.slots())):
        proj = base.get_submodule(adapter.output_weight_name(slot).rsplit(".", 1)[0])
        handles.append(proj.register_forward_hook(
            lambda m, a, o, s=slot: seen.__setitem__(s, (o.detach().clone(), m.bias.detach().clone()))))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("family", ["gpt2", "bert", "gpt_neo"])
def test_ablation_removes_u_from_every_layers_write_and_undoes_exactly(family: str, tmp_path: Path) -> None:
    model = make_model(family)
    original = copy.deepcopy(model.state_dict())
    u = random_vector()
    u = u / u.norm()
    rec = ablate(model, u, report=False)
    ids = torch.randint(5, 100, (3, 12), generator=torch.Generator().manual_seed(7))  # held-out ids
    writes = _writes(model, ids)
    assert len(rec.edits) == len(writes) == 2
    for slot, (out, b_O) in writes.items():
        write = (out - b_O).reshape(-1, out.shape[-1]).double()  # the token-dependent write W_O z
        proj = (write @ u).abs()
        assert (proj <= 1e-6 * write.norm(dim=-1)).all(), (slot, float(proj.max()))
        assert float(write.norm(dim=-1).min()) > 1e-3  # the layer still writes everything else
    # F' = (I − uuᵀ) F, from the edited weights
    F0 = layer_matrices(make_model(family), layers=[0]).matrices[0]
    F1 = layer_matrices(model, layers=[0]).matrices[0]
    P = torch.eye(64, dtype=torch.float64) - torch.outer(u, u)
    torch.testing.assert_close(F1, P @ F0, rtol=0, atol=1e-10)
    out = save_steered(model, tmp_path / "ablated")
    assert verify_checkpoint(out)["ok"]
    unsteer(model)
    assert all(torch.equal(original[k], v) for k, v in model.state_dict().items())


def test_partial_ablation_selected_layers_and_lora_export(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    model = make_model("gpt2", dtype=torch.float32)
    base = copy.deepcopy(model)
    u = random_vector()
    rec = ablate(model, u, layers=[1], scale=0.5, report=False)
    assert [e.layer for e in rec.edits] == [1] and rec.gain == -0.5
    folder = save_steered(model, tmp_path / "lora", format="peft")
    pm = peft.PeftModel.from_pretrained(base, str(folder)).eval()
    ids = torch.randint(5, 100, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, got = model(input_ids=ids).logits, pm(input_ids=ids).logits
    assert float((got - want).abs().max() / want.abs().max()) <= 1e-5


def test_negative_gain_steers_away() -> None:
    model = make_model("gpt2")
    u, w = random_vector(seed=1), random_vector(seed=2)
    F0 = layer_matrices(model, layers=[1]).matrices[0]
    rec = steer(model, u, left=w, gain=-3.0, solve="exact", report=False)
    F1 = layer_matrices(model, layers=[1]).matrices[0]
    torch.testing.assert_close(F1, F0 - 3.0 * torch.outer(u / u.norm(), w / w.norm()), rtol=0, atol=1e-9)
    assert rec.gain == -3.0
    unsteer(model)
    with pytest.raises(InvalidArgumentError, match="non-zero"):
        steer(model, u, gain=0.0, solve="exact", report=False)


def test_ablation_bad_input() -> None:
    model = make_model("bert")
    for kw, match in (({"scale": 1.5}, "scale=1.5"), ({"scale": 0}, "scale=0"), ({"layers": [0, 0]}, "each layer once")):
        with pytest.raises(InvalidArgumentError, match=match):
            ablate(model, random_vector(), report=False, **kw)


def test_cli_ablate_all_layers(tmp_path: Path) -> None:
    import numpy as np
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    make_model("bert", dtype=torch.float32).save_pretrained(tmp_path / "base")
    np.save(tmp_path / "u.npy", random_vector().numpy())
    res = CliRunner().invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(tmp_path / "u.npy"),
                                   "--method", "ablation", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "ablated layers [0, 1]" in res.output
    res = CliRunner().invoke(app, ["verify", str(tmp_path / "a")])
    assert res.exit_code == 0 and "FAIL" not in res.output, res.output


@pytest.mark.parametrize("kw", [{"layer": 0}, {"gain": 2.0}, {"strength": 3.0}],
                         ids=["ablate-layer", "ablate-gain", "ablate-strength"])
def test_ablate_mode_refuses_steering_options(kw) -> None:
    # Found after the merge: steer(method="ablation", layer=0) ablated every layer and ignored gain/strength.
    from steerformer.steering import steer

    model = make_model("bert")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(InvalidArgumentError, match=next(iter(kw))):
        steer(model, random_vector(), method="ablation", report=False, **kw)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
