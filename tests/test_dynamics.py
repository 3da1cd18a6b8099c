"""One step of the controlled dynamics against an independent path through the real module."""

from __future__ import annotations

import pytest
import torch

from steerformer import layer_matrices, run_dynamics
from steerformer.adapters import get_adapter
from steerformer.errors import InvalidArgumentError
from steerformer.loading import open_source
from steerformer.matrices import read_attention_weights

from tests.models import make_model


@pytest.mark.parametrize("family", ["gpt2", "gpt_neo", "bert", "albert-2groups-inner2"])
def test_one_layer_equals_module_attention_then_F(family: str) -> None:
    model = make_model(family)
    adapter = get_adapter(model.config)
    F = layer_matrices(model).matrices
    x0 = torch.randn(3, 7, adapter.d_model, dtype=torch.float64)
    x0 = x0 / x0.norm(dim=-1, keepdim=True)
    traj = run_dynamics(model, x0)
    x = x0
    base = model.base_model
    for k in range(adapter.n_layers):
        # Independent path: the attention module itself gives A^h (eager, output_attentions), then
        # x + F (A x) and the L2 normalization by hand.
        attn = base.get_submodule(adapter.slots()[adapter.layer_sequence()[k]])
        kwargs = {"output_attentions": True}
        if adapter.model_type == "gpt2":
            # transformers 5 builds GPT-2's causal mask at model level: hand the module an additive
            # one. (GPT-Neo's attention applies its own causal/local mask buffer.)
            n = x.shape[1]
            kwargs["attention_mask"] = torch.full((n, n), float("-inf"), dtype=x.dtype).triu(1)[None, None]
        with torch.no_grad():
            out = attn(x, **kwargs)
        A = out[1] if isinstance(out, tuple) else None
        assert A is not None
        Ax = torch.einsum("bhij,bjd->bhid", A.to(torch.float64), x)
        # Per head: M_h applied to A^h x, summed.
        M = read_attention_weights(open_source(model), [k])[k].head_matrices()
        y = x + torch.einsum("hde,bhie->bid", M, Ax)
        y = y / y.norm(dim=-1, keepdim=True)
        tol = 1e-5 if adapter.model_type == "gpt_neo" else 1e-10
        assert (traj.states[k + 1] - y).abs().max().item() < tol
        assert torch.allclose(F[k] @ torch.ones(adapter.d_model, dtype=torch.float64),
                              M.sum(0) @ torch.ones(adapter.d_model, dtype=torch.float64))
        x = traj.states[k + 1]


def test_bad_tokens_name_the_width() -> None:
    model = make_model("gpt2")
    with pytest.raises(InvalidArgumentError, match=r"tokens=.*\(prompts, tokens, 64\)"):
        run_dynamics(model, torch.ones(2, 3, 5))
    z = torch.ones(1, 3, 64)
    z[0, 1] = 0
    with pytest.raises(InvalidArgumentError, match="zero vector at prompt 0, token 1"):
        run_dynamics(model, z)
    with pytest.raises(InvalidArgumentError, match="repeat"):
        run_dynamics(model, repeat=0)
