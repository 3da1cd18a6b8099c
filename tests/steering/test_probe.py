"""The probe room (steering/probe.py) against the model's own forward pass: what a capture records is
what the blocks received and returned (read with hooks of the test's own, and ``output_hidden_states``),
a re-run from a cached layer gives the model's final states and its logits, the selection mask picks
the positions that predict each answer token, the KL is the closed form, and no hook outlives a call —
whether it stops early or the forward raises. Over families with different block signatures (GPT-2's
positional arguments, Llama's keywords and rotary embeddings, ALBERT's shared block)."""

from __future__ import annotations

import pytest
import torch

from steerformer.errors import SteerformerError
from steerformer.loading import open_source
from steerformer.prompts import PromptBatch
from steerformer.steering.probe import AnswerBatch, BlockCache, KLProbe, capture, kl_per_token

from ..models import make_model

FAMILIES = ["gpt2", "llama", "albert"]


def _model(name: str):
    kw = {"head": True} if name == "llama" else {}
    model = make_model(name, dtype=torch.float64, **kw).eval()
    if name == "llama":  # transformers' init (std 0.02) gives near-uniform next tokens: widen the head
        with torch.no_grad():
            model.lm_head.weight.mul_(30.0)
    return model


def _batch() -> PromptBatch:
    return PromptBatch.from_rows([[5, 9, 13, 22, 40], [7, 3, 11]], pad_id=0)  # right-padded second row


def _hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def _block_io(model, adapter, batch):
    """(inputs, outputs) of every execution layer, read with the test's own hooks on a full forward."""
    base = model.base_model
    names = sorted({adapter.layer_block(s) for s in set(adapter.layer_sequence())})
    ins, outs = [], []
    hs = []
    for n in names:
        b = base.get_submodule(n)
        hs.append(b.register_forward_pre_hook(
            lambda m, a, kw: ins.append(a[0] if a else kw["hidden_states"]), with_kwargs=True))
        hs.append(b.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o)))
    with torch.no_grad():
        base(**batch.inputs())
    for h in hs:
        h.remove()
    return ins, outs


@pytest.mark.parametrize("family", FAMILIES)
def test_a_capture_records_what_each_block_received_and_returned(family) -> None:
    model = _model(family)
    adapter = open_source(model).adapter
    n = len(adapter.layer_sequence())
    batch = _batch()
    ins, outs = _block_io(model, adapter, batch)
    hooks = _hooks(model)
    got = capture(model, adapter, batch, inputs=range(n), outputs=range(n))
    assert _hooks(model) == hooks
    for k in range(n):
        name, args, kwargs = got.inputs[k]
        torch.testing.assert_close(args[0] if args else kwargs["hidden_states"], ins[k], rtol=0, atol=0)
        torch.testing.assert_close(got.outputs[k], outs[k], rtol=0, atol=0)


def test_a_capture_stops_after_the_last_thing_asked_for_and_reads_a_module_input() -> None:
    model = _model("llama")
    adapter = open_source(model).adapter
    batch = _batch()
    seen = []  # how many blocks ran
    hs = [b.register_forward_pre_hook(lambda m, a: seen.append(1)) for b in model.model.layers]
    down = adapter.last_writer(0, "tiny").module
    own = []
    hs.append(model.base_model.get_submodule(down).register_forward_pre_hook(lambda m, a: own.append(a[0])))
    got = capture(model, adapter, batch, modules={0: [down]})
    assert len(seen) == 1  # block 1 never ran
    torch.testing.assert_close(got.modules[(0, down)], own[0], rtol=0, atol=0)
    for h in hs:
        h.remove()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_rerun_from_any_layer_gives_the_models_final_states(family) -> None:
    model = _model(family)
    adapter = open_source(model).adapter
    batch = _batch()
    with torch.no_grad():
        want = model.base_model(**batch.inputs()).last_hidden_state
    cache = BlockCache.of(model, adapter, batch, 0)
    for start in range(len(adapter.layer_sequence())):
        h, _ = cache.states(start)
        torch.testing.assert_close(h, want, rtol=1e-12, atol=1e-12)


def test_a_rerun_with_a_parameter_replaced_equals_the_model_with_that_weight_and_leaves_it_untouched() -> None:
    model = _model("llama")
    adapter = open_source(model).adapter
    batch = _batch()
    name = adapter.last_writer(1, "tiny").weight
    W = model.base_model.get_parameter(name)
    before = W.detach().clone()
    new = before + 0.3 * torch.randn(before.shape, generator=torch.Generator().manual_seed(1), dtype=before.dtype)
    cache = BlockCache.of(model, adapter, batch, 1)
    h, _ = cache.states(params={name: new})
    assert torch.equal(W.detach(), before)
    with torch.no_grad():
        W.copy_(new)
        want = model.base_model(**batch.inputs()).last_hidden_state
        W.copy_(before)
    torch.testing.assert_close(h, want, rtol=1e-12, atol=1e-12)


def test_the_selection_mask_picks_the_positions_that_predict_each_answer_token() -> None:
    rows = AnswerBatch.of([[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]], pad=0)
    assert rows.batch.input_ids.tolist() == [[1, 2, 3, 6, 7], [4, 5, 8, 9, 10]]
    # position t predicts token t+1: the last prompt token predicts the answer's first
    assert rows.select.tolist() == [[False, False, True, True, False], [False, True, True, True, False]]
    assert rows.row.tolist() == [0, 0, 1, 1, 1]
    model = _model("llama")
    with torch.no_grad():
        logits = model(**rows.batch.inputs()).logits
    split = rows.per_answer(rows.logprobs(model))
    torch.testing.assert_close(split[1], torch.log_softmax(logits[1, 1:4], -1), rtol=1e-12, atol=1e-12)
    assert [t.shape[0] for t in split] == [2, 3]


def test_the_kl_is_the_closed_form_and_a_cached_probe_measures_an_edit_like_a_full_forward() -> None:
    p = torch.log_softmax(torch.tensor([[0.2, 1.0, -0.5]], dtype=torch.float64), -1)
    q = torch.log_softmax(torch.tensor([[1.0, 0.0, 0.3]], dtype=torch.float64), -1)
    want = float((p.exp() * (p - q)).sum())
    assert float(kl_per_token(p, q)) == pytest.approx(want, rel=1e-12)
    assert float(kl_per_token(p, q)) == pytest.approx(float(torch.nn.functional.kl_div(q, p, log_target=True,
                                                                                       reduction="sum")), rel=1e-12)
    model = _model("llama")
    adapter = open_source(model).adapter
    rows = AnswerBatch.of([[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]], pad=0)
    probe = KLProbe.of(model, adapter, rows, cached=True)
    assert probe.kl(probe.rerun(0)) == 0.0
    name = adapter.last_writer(1, "tiny").weight
    W = model.base_model.get_parameter(name)
    before = W.detach().clone()
    with torch.no_grad():
        W.add_(1.0)
    try:
        cached, full = probe.kl(probe.rerun(1)), probe.kl_of(model)
    finally:
        with torch.no_grad():
            W.copy_(before)
    assert cached > 1e-4 and cached == pytest.approx(full, rel=1e-9)


def test_no_hook_is_left_when_a_layer_is_refused_or_the_forward_raises() -> None:
    model = _model("llama")
    adapter = open_source(model).adapter
    hooks = _hooks(model)
    with pytest.raises(SteerformerError, match="layers"):
        capture(model, adapter, _batch(), outputs=[19])  # refused before any hook

    def broken(m, args):  # the test's own hook: the forward raises inside block 1
        raise IndexError("raised inside the forward")

    own = model.model.layers[1].register_forward_pre_hook(broken)
    try:
        with pytest.raises(IndexError, match="inside the forward"):
            capture(model, adapter, _batch(), inputs=[0, 1])
    finally:
        own.remove()
    assert _hooks(model) == hooks
