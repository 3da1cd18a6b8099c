"""The ``Edit`` value on any writer's weight (docs/math.md §5e): rank-k factors, row and column scales,
a bias change and one expert of a stacked weight — applied as the formula says (checked with a
matrix product written here), removed bit for bit, and carried through JSON exactly."""

from __future__ import annotations

import json

import torch

from steerformer.steering import Edit
from steerformer.steering.common import tensor_sha256

from tests.models import make_model


def _g(seed: int, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_rank_k_edit_with_scales_and_bias_on_a_conv1d_mlp() -> None:
    model = make_model("gpt2")
    base = model.base_model
    name, bias = "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"
    W0, b0 = base.get_parameter(name).detach().clone(), base.get_parameter(bias).detach().clone()
    U, A, r, c, delta = _g(1, 64, 3), _g(2, 3, 256), 1 + 0.1 * _g(3, 64), 1 + 0.1 * _g(4, 256), _g(5, 64)
    e = Edit(module=name, layer=0, slot=0, u=U, a=A, gain=-0.7, kind="ablate", writer="mlp", transposed=True,
             row_scale=r, col_scale=c, bias_module=bias, bias_delta=delta)
    assert (e.rank, e.is_low_rank, e.changes_bias) == (3, False, True)
    e.apply(model)
    want = (r[:, None] * W0.T * c[None, :] - 0.7 * U @ A).T  # Conv1D stores Wᵀ
    torch.testing.assert_close(base.get_parameter(name).detach(), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(base.get_parameter(bias).detach(), b0 + delta, rtol=0, atol=1e-15)
    # JSON round trip, then replay on the original weights gives the same bytes
    again = Edit.from_dict(json.loads(json.dumps(e.to_dict())))
    assert again == e and again.rank == 3
    e.remove(model)
    assert torch.equal(base.get_parameter(name), W0) and torch.equal(base.get_parameter(bias), b0)
    again.apply(model, check=True)  # the recorded after_sha256 must match
    assert tensor_sha256(base.get_parameter(name)) == e.after_sha256


def test_one_expert_of_a_stacked_weight_is_edited_alone() -> None:
    model = make_model("mixtral")
    base = model.base_model
    name = "layers.1.mlp.experts.down_proj"
    W0 = base.get_parameter(name).detach().clone()  # (experts, d, ffn)
    u, a = _g(6, W0.shape[1]), _g(7, W0.shape[2])
    e = Edit(module=name, layer=1, slot=1, u=u, a=a, gain=0.5, writer="mlp", index=1).apply(model)
    W1 = base.get_parameter(name).detach()
    assert torch.equal(W1[0], W0[0])
    torch.testing.assert_close(W1[1], W0[1] + 0.5 * torch.outer(u, a), rtol=0, atol=1e-14)
    e.remove(model)
    assert torch.equal(base.get_parameter(name), W0)


def test_a_format_1_edit_reads_as_a_rank_1_attention_edit() -> None:
    old = {"format": "steerformer.edit/1", "module": "h.1.attn.c_proj.weight", "layer": 1, "slot": 1,
           "u": [1.0, 0.0], "a": [0.5, 0.25], "gain": 2.0, "kind": "steer", "transposed": True}
    e = Edit.from_dict(old)
    assert (e.writer, e.rank, e.index, e.is_low_rank, e.changes_bias) == ("attention", 1, None, True, False)
    assert "row_scale" not in e.to_dict() and e.to_dict()["u"] == [1.0, 0.0]
