"""Each adapter's canonical weights reproduce the real attention sublayer (taken by a hook)."""

from __future__ import annotations

import pytest
import torch

from steerformer.adapters import get_adapter
from steerformer.attention import attention_probs
from steerformer.errors import UnsupportedModelError
from steerformer.loading import open_source
from steerformer.matrices import read_attention_weights

from tests.models import FAMILIES, make_model


@pytest.mark.parametrize("family", list(FAMILIES))
def test_sum_of_head_matrices_reproduces_attention_output(family: str) -> None:
    model = make_model(family)
    adapter = get_adapter(model.config)
    base = model.base_model
    inputs_seen: dict[int, torch.Tensor] = {}
    outputs_seen: dict[int, torch.Tensor] = {}
    handles = []
    seq = adapter.layer_sequence()
    for slot in range(len(adapter.slots())):
        # The attention input: hidden states after ln_1 (pre-LN) or the layer input (post-LN).
        attn_mod = base.get_submodule(adapter.slots()[slot])
        out_mod = base.get_submodule(adapter.attention_module_output(slot))
        calls_in: list = []
        calls_out: list = []
        handles.append(attn_mod.register_forward_pre_hook(
            lambda m, a, kw, c=calls_in: c.append((a[0] if a else kw["hidden_states"]).detach()), with_kwargs=True))
        handles.append(out_mod.register_forward_hook(
            lambda m, a, o, c=calls_out: c.append((o[0] if isinstance(o, tuple) else o).detach())))
        inputs_seen[slot], outputs_seen[slot] = calls_in, calls_out
    ids = torch.randint(0, 100, (2, 9))
    with torch.no_grad():
        module_probs = model(input_ids=ids, output_attentions=True).attentions
    for h in handles:
        h.remove()
    weights = read_attention_weights(open_source(model))
    for k in range(adapter.n_layers):
        slot = seq[k]
        call = seq[:k].count(slot)  # the how-many-th time this slot ran
        x = inputs_seen[slot][call]
        w = weights[k]
        # The module's own attention probabilities, so this checks F and the bias alone.
        A = module_probs[k].to(torch.float64)
        M = w.head_matrices()
        expected = torch.einsum("hde,bhne->bnd", M, A @ x[:, None]) + w.output_bias()
        got = outputs_seen[slot][call]
        assert (expected - got).abs().max().item() < 1e-10, f"layer {k} ({family})"
        # Our attention from the query/key weights, scale and mask. GPT-Neo's module computes its
        # scores in float32 even in a float64 model, so it only agrees to float32 precision.
        tol = 1e-5 if adapter.model_type == "gpt_neo" else 1e-10
        assert (attention_probs(x, w) - A).abs().max().item() < tol, f"layer {k} ({family})"


def test_albert_layer_sequence_matches_execution_order() -> None:
    model = make_model("albert-2groups-inner2")
    adapter = get_adapter(model.config)
    # 4 layers, 2 groups of 2 inner layers: layers 0,1 run group 0, layers 2,3 run group 1.
    assert adapter.layer_sequence() == [0, 1, 0, 1, 2, 3, 2, 3]
    assert adapter.shares_weights


def test_gpt_neo_masks_alternate_global_local() -> None:
    adapter = get_adapter(make_model("gpt_neo").config)
    assert adapter.mask(0).kind == "causal"
    local = adapter.mask(1)
    assert (local.kind, local.window) == ("causal_local", 3)
    allowed = local.allowed(6)
    # query 5 sees keys 3, 4, 5 only (i - window < j <= i)
    assert allowed[5].tolist() == [False, False, False, True, True, True]
    assert adapter.scale(0) == 1.0


def test_unsupported_model_type_lists_supported() -> None:
    from transformers import T5Config

    with pytest.raises(UnsupportedModelError, match=r"model_type='t5'.*albert, bert, .*gpt2, .*llama"):
        get_adapter(T5Config())
