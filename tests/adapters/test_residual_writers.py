"""Every family's declared residual-stream writers (docs/math.md §5e) against the model's own modules:
the declared weights and biases exist with the declared layout, each writer's module computes
y = W z + b with the declared W, and what the blocks (and the embeddings) add to the residual
stream is exactly the sum of the declared writes — read with hooks on one forward pass."""

from __future__ import annotations

import pytest
import torch

from steerformer.adapters import ADAPTERS, get_adapter
from steerformer.adapters.base import first_output

from tests.models import DECLARED_FAMILIES, make_model

HAND_WRITTEN = ["gpt2", "gpt_neo", "bert", "albert", "albert-2groups-inner2"]
NAMES = HAND_WRITTEN + DECLARED_FAMILIES
#: post-LN blocks: the LayerNorm after the attention residual add and the one after the MLP's
#: (transcribed from each modeling file)
POST_LN = {"bert": ("attention.output.LayerNorm", "output.LayerNorm"),
           "roberta": ("attention.output.LayerNorm", "output.LayerNorm"),
           "xlm-roberta": ("attention.output.LayerNorm", "output.LayerNorm"),
           "albert": ("attention.LayerNorm", "full_layer_layer_norm"),
           "distilbert": ("sa_layer_norm", "output_layer_norm"),
           "opt": ("self_attn_layer_norm", "final_layer_norm")}


def test_every_registered_family_is_covered() -> None:
    assert {make_model(n).config.model_type for n in NAMES} == set(ADAPTERS)


def _model_and_ids(name: str):
    model = make_model(name)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(3, vocab, (2, 7), generator=torch.Generator().manual_seed(0))
    return model, ids


def _record(model, adapter, ids):
    """One forward pass recording, per module name, the (inputs, output) of every call."""
    base = model.base_model
    names = {w.output_module for w in adapter.writers()} | {w.norm for w in adapter.writers() if w.norm}
    names |= {w.module for w in adapter.writers()}
    blocks = adapter.blocks(base)
    post = POST_LN.get(model.config.model_type)
    if post is not None:
        names |= {f"{adapter.layer_block(s)}.{n}" for s in range(len(adapter.slots())) for n in post}
    seen: dict[str, list] = {n: [] for n in names}
    block_io: list = []
    # clones: a model may add to a module's output in place afterwards (Falcon: mlp_output += attention)
    handles = [base.get_submodule(n).register_forward_hook(
        lambda m, a, kw, o, n=n: seen[n].append(((a[0] if a else next(iter(kw.values()))).clone(),
                                                 first_output(o).clone())), with_kwargs=True) for n in names]
    handles += [b.register_forward_hook(
        lambda m, a, kw, o: block_io.append(((a[0] if a else kw["hidden_states"]).clone(), first_output(o).clone())),
        with_kwargs=True) for b in dict.fromkeys(blocks)]
    try:
        with torch.no_grad():
            base(input_ids=ids, **({"use_cache": False} if getattr(model.config, "use_cache", None) is not None else {}))
    finally:
        for h in handles:
            h.remove()
    return seen, block_io


@pytest.mark.parametrize("name", NAMES)
def test_declared_writers_exist_with_their_layout_and_bias(name: str) -> None:
    model, _ = _model_and_ids(name)
    adapter = get_adapter(model.config)
    base = model.base_model
    kinds = {w.kind for w in adapter.writers()}
    assert {"attention", "mlp", "embedding"} <= kinds
    for slot in range(len(adapter.slots())):
        attn, mlp = adapter.block_writers(slot)
        assert (attn.kind, mlp.kind, attn.slot, mlp.slot) == ("attention", "mlp", slot, slot)
        assert attn.weight == adapter.output_weight_name(slot)  # the weight steering already edits
    for w in adapter.writers():
        stored = base.get_parameter(w.weight)
        mats = list(stored) if w.layout == "experts" else [stored]
        for m in mats:
            assert w.canonical(m).shape[0] == adapter.d_model, (w, tuple(m.shape))
        bias = getattr(base.get_submodule(w.module), "bias", None) if w.layout != "experts" else None
        assert (bias is not None) == w.bias, (w, bias is not None)
        if w.bias:
            assert base.get_parameter(w.bias_name).shape == (adapter.d_model,)
        for path in (w.output_module, w.norm):
            if path is not None:
                base.get_submodule(path)


@pytest.mark.parametrize("name", NAMES)
def test_each_writer_computes_its_declared_map(name: str) -> None:
    """y = W z + b on the module's own inputs and outputs (W from the declared layout); an
    embedding's output for token t is a multiple of W's column t (Gemma scales it by √d)."""
    model, ids = _model_and_ids(name)
    adapter = get_adapter(model.config)
    base = model.base_model
    seen, _ = _record(model, adapter, ids)
    for w in adapter.writers():
        if w.layout == "experts":
            continue  # routed: checked through the block sum below
        W = w.canonical(base.get_parameter(w.weight).detach())
        for z, y in seen[w.module]:
            if w.kind in ("embedding", "token_type", "positions") and w.layout == "in_out":
                if w.kind != "embedding":
                    continue  # positions are indexed by the model, not by the ids
                cols = W[:, ids].permute(1, 2, 0)  # (batch, n, d)
                ratio = (y * cols).sum(-1) / (cols * cols).sum(-1)
                torch.testing.assert_close(y, cols * ratio[..., None], rtol=0, atol=1e-9)
                torch.testing.assert_close(ratio, torch.full_like(ratio, float(ratio.flatten()[0])))
                continue
            want = z @ W.T + (base.get_parameter(w.bias_name) if w.bias else 0)
            torch.testing.assert_close(y, want, rtol=0, atol=1e-9)


def _write(seen: dict, w, call: int, shape) -> torch.Tensor:
    """What writer ``w`` added to the residual stream in its ``call``-th use (after its own norm);
    OPT runs its MLP on the (batch·n, d) flattened states."""
    if w.norm is not None and w.norm_kind != "layernorm":
        return seen[w.norm][call][1].reshape(shape)
    return seen[w.output_module][call][1].reshape(shape)


@pytest.mark.parametrize("name", NAMES)
def test_the_residual_stream_receives_exactly_the_declared_writes(name: str) -> None:
    model, ids = _model_and_ids(name)
    adapter = get_adapter(model.config)
    seen, block_io = _record(model, adapter, ids)
    seq = adapter.layer_sequence()
    uses = {s: 0 for s in set(seq)}
    assert len(block_io) == len(seq)
    post = POST_LN.get(model.config.model_type) if adapter.residual == "post" else None
    for k, s in enumerate(seq):
        attn, mlp = adapter.block_writers(s)
        n = uses[s]
        uses[s] += 1
        x, out = block_io[k]
        if post is None:  # pre-LN, parallel, sandwich, norm-after: out = x + attention write + MLP write
            torch.testing.assert_close(out - x, _write(seen, attn, n, x.shape) + _write(seen, mlp, n, x.shape), rtol=0,
                                       atol=1e-9)
        else:  # post-LN: LN₁(x + attention write), then LN₂(LN₁(...) + MLP write)
            ln1, ln2 = (seen[f"{adapter.layer_block(s)}.{p}"][n] for p in post)
            torch.testing.assert_close(ln1[0], x + _write(seen, attn, n, x.shape), rtol=0, atol=1e-9)
            torch.testing.assert_close(ln2[0].reshape(x.shape), ln1[1].reshape(x.shape) + _write(seen, mlp, n, x.shape),
                                       rtol=0, atol=1e-9)
    # The embeddings: their writes (summed, through their LayerNorm if any) are the first block's input.
    emb = adapter.embedding_writers()
    total = sum(seen[w.output_module][0][1] for w in emb)
    norm = {w.norm for w in emb} - {None}
    if norm:
        (ln,) = norm
        torch.testing.assert_close(seen[ln][0][0], total, rtol=0, atol=1e-9)
        total = seen[ln][0][1]
    torch.testing.assert_close(block_io[0][0], total.expand_as(block_io[0][0]), rtol=0, atol=1e-9)
