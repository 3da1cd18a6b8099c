"""``Direction.apply(model)`` is a run-time hook (a context manager, as steering-vectors'
``SteeringVector.apply``) and ``Direction.steer(model)`` a weight edit, both checked against an
independent computation: a hand-written forward hook, and the projection W' = W (I − uuᵀ)."""

from __future__ import annotations

import torch

from steerformer.steering import Direction, unsteer
from tests.conftest import random_vector
from tests.models import make_model

IDS = torch.tensor([[3, 9, 4, 7, 1, 5]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def test_apply_adds_coeff_v_after_each_held_layer_and_removes_itself() -> None:
    model = make_model("gpt2", dtype=torch.float32)
    v0, v1 = random_vector(64, seed=1), random_vector(64, seed=2)
    direction = Direction({0: v0[None], 1: v1[None]})
    base = _logits(model)

    def add(v):  # the independent computation: a block's output plus c·v
        shift = 0.7 * v.to(torch.float32)
        return lambda m, a, out: out + shift if isinstance(out, torch.Tensor) else (out[0] + shift, *out[1:])
    handles = [model.transformer.h[k].register_forward_hook(add(v)) for k, v in ((0, v0), (1, v1))]
    expected = _logits(model)
    for h in handles:
        h.remove()
    with direction.apply(model, coeff=0.7):
        got = _logits(model)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(_logits(model), base)  # removed on exit
    assert not torch.allclose(got, base)


def test_steer_edits_the_weights_and_unsteer_restores_them() -> None:
    model = make_model("gpt2", dtype=torch.float64)
    u = random_vector(64, seed=3)
    W = model.transformer.h[1].attn.c_proj.weight.detach().clone()  # Conv1D: y = x W, writes W's columns
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rec = Direction({1: u[None]}).steer(model, method="ablation", layers=[1], report=False)
    unit = u / u.norm()
    expected = W - (W @ unit)[:, None] * unit[None, :]  # W (I − uuᵀ)
    torch.testing.assert_close(model.transformer.h[1].attn.c_proj.weight.detach(), expected, rtol=0, atol=1e-12)
    assert rec.method == "ablation"
    unsteer(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_contrastive_reduction_has_its_own_name() -> None:
    from steerformer.steering import contrastive_direction

    model = make_model("gpt2", dtype=torch.float64)
    pos, neg = [[5, 6, 7], [8, 9]], [[10, 11, 12], [13, 14]]

    class Tok:  # token ids as given: the prompts are already ids
        pad_token_id, eos_token_id, padding_side = 0, 0, "right"

        def __call__(self, texts, **kw):
            return {"input_ids": [list(map(int, t.split())) for t in texts]}

    texts = lambda rows: [" ".join(map(str, r)) for r in rows]  # noqa: E731
    new = contrastive_direction(model, texts(pos), texts(neg), layer=0, reduction="mean", tokenizer=Tok())
    assert new.reduction == "mean"
