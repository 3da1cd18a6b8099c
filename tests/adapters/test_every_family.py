"""Every declared family (docs/math.md §1b) against the model's own modules: tiny random models built
from each config class, float64, eager attention, random biases and norm weights.

(a) lazy F = in-memory F = a reference written here from the raw stored tensors;
(b) the library's attention probabilities = the module's own eager attention weights;
(c) F·(A x) + bias = the output projection's output (hook);
(d) one collapse pass = the model's own hidden states; "without FFN" per residual shape;
(e) steer → save → plain from_pretrained = the in-memory steered model; unsteer bit-exact; verify;
(f) ``steerformer analyze`` end to end on the saved checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from steerformer import layer_matrices
from steerformer.adapters import get_adapter
from steerformer.attention import attention_output, attention_probs
from steerformer.collapse.loop import LoopedModel
from steerformer.loading import open_source
from steerformer.matrices import read_attention_weights

from tests.models import DECLARED_FAMILIES, DECLARED_VOCAB, SPECS, family_config, make_model

IDS = torch.randint(3, DECLARED_VOCAB, (2, 7), generator=torch.Generator().manual_seed(0))  # 7 > the windows 3 and 4


def _raw_value_output(family: str, sd: dict, i: int, cfg) -> tuple:
    """(W_v rows (H_kv·d_h, d), b_v, W_o (d, H·d_h), b_o) of layer i, sliced by hand from the raw
    state dict (the transcription of each family's storage, independent of the adapters)."""
    g = lambda k: sd.get(k)  # noqa: E731
    if family in ("gpt_neox", "bloom"):
        H = cfg.num_attention_heads
        p = f"h.{i}.self_attention" if family == "bloom" else f"layers.{i}.attention"
        W, b = sd[f"{p}.query_key_value.weight"], sd[f"{p}.query_key_value.bias"]
        dh = W.shape[0] // (3 * H)
        Wv = torch.cat([W[h * 3 * dh + 2 * dh:(h + 1) * 3 * dh] for h in range(H)])
        bv = torch.cat([b[h * 3 * dh + 2 * dh:(h + 1) * 3 * dh] for h in range(H)])
        return Wv, bv, sd[f"{p}.dense.weight"], g(f"{p}.dense.bias")
    if family.startswith("gpt_bigcode"):
        H, dh = cfg.n_head, cfg.n_embd // cfg.n_head
        W, b = sd[f"h.{i}.attn.c_attn.weight"], sd[f"h.{i}.attn.c_attn.bias"]
        if cfg.multi_query:  # [Q (H·d_h) | K (d_h) | V (d_h)]
            Wv, bv = W[-dh:], b[-dh:]
        else:  # per head [q k v]
            Wv = torch.cat([W[h * 3 * dh + 2 * dh:(h + 1) * 3 * dh] for h in range(H)])
            bv = torch.cat([b[h * 3 * dh + 2 * dh:(h + 1) * 3 * dh] for h in range(H)])
        return Wv, bv, sd[f"h.{i}.attn.c_proj.weight"], sd[f"h.{i}.attn.c_proj.bias"]
    if family.startswith("falcon"):
        H, G = cfg.num_attention_heads, get_adapter(cfg).n_kv_heads
        dh = cfg.hidden_size // H
        W, b = sd[f"h.{i}.self_attention.query_key_value.weight"], sd.get(f"h.{i}.self_attention.query_key_value.bias")
        if cfg.new_decoder_architecture:  # per KV head g: [q × H/G, k, v]
            r = H // G
            rows = [slice((g * (r + 2) + r + 1) * dh, (g * (r + 2) + r + 2) * dh) for g in range(G)]
        else:  # multi-query: [Q | K | V]
            rows = [slice(W.shape[0] - dh, W.shape[0])]
        Wv = torch.cat([W[s] for s in rows])
        bv = None if b is None else torch.cat([b[s] for s in rows])
        return Wv, bv, sd[f"h.{i}.self_attention.dense.weight"], sd.get(f"h.{i}.self_attention.dense.bias")
    if family == "phi3":
        W = sd[f"layers.{i}.self_attn.qkv_proj.weight"]
        n_kv = cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
        return W[-n_kv:], None, sd[f"layers.{i}.self_attn.o_proj.weight"], None
    if family in ("roberta", "xlm-roberta"):
        p = f"encoder.layer.{i}.attention"
        return sd[f"{p}.self.value.weight"], sd[f"{p}.self.value.bias"], sd[f"{p}.output.dense.weight"], \
            sd[f"{p}.output.dense.bias"]
    if family == "distilbert":
        p = f"transformer.layer.{i}.attention"
        return sd[f"{p}.v_lin.weight"], sd[f"{p}.v_lin.bias"], sd[f"{p}.out_lin.weight"], sd[f"{p}.out_lin.bias"]
    p = f"decoder.layers.{i}.self_attn" if family.startswith("opt") else f"h.{i}.attn" if family == "gptj" \
        else f"layers.{i}.self_attn"
    out = "out_proj" if family in ("opt", "opt-postln", "gptj") else "dense" if family == "phi" else "o_proj"
    return sd[f"{p}.v_proj.weight"], g(f"{p}.v_proj.bias"), sd[f"{p}.{out}.weight"], g(f"{p}.{out}.bias")


def _reference_F(family: str, model) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = model.config
    ad = get_adapter(cfg)
    H, G, dh = ad.n_heads, ad.n_kv_heads, ad.head_dim
    sd = model.base_model.state_dict()
    Fs, bs = [], []
    for i in range(ad.n_layers):
        Wv, bv, Wo, bo = _raw_value_output(family, sd, i, cfg)
        F = torch.zeros(Wo.shape[0], Wv.shape[1], dtype=torch.float64)
        bias = torch.zeros(Wo.shape[0], dtype=torch.float64) if bo is None else bo.clone()
        for h in range(H):
            gh = h * G // H  # transformers' repeat_kv
            F += Wo[:, h * dh:(h + 1) * dh] @ Wv[gh * dh:(gh + 1) * dh]
            if bv is not None:
                bias += Wo[:, h * dh:(h + 1) * dh] @ bv[gh * dh:(gh + 1) * dh]
        Fs.append(F)
        bs.append(bias)
    return torch.stack(Fs), torch.stack(bs)


@pytest.mark.parametrize("family", DECLARED_FAMILIES)
def test_layer_matrices_lazy_memory_and_raw_reference(tmp_path: Path, family: str) -> None:
    model = make_model(family)
    sharded = family in ("llama", "gpt_neox")
    model.save_pretrained(tmp_path, **({"max_shard_size": "20KB"} if sharded else {}))
    if sharded:
        assert (tmp_path / "model.safetensors.index.json").is_file()
    mem, lazy = layer_matrices(model), layer_matrices(tmp_path)
    F_ref, b_ref = _reference_F(family, model)
    torch.testing.assert_close(mem.matrices, F_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(lazy.matrices, F_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(mem.biases, b_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(lazy.biases, b_ref, atol=1e-10, rtol=0)
    # Factored form (docs/math.md §1b): F = A B with r = H_kv·d_h columns.
    ad = get_adapter(model.config)
    w = read_attention_weights(open_source(model), [0], parts=("vo",))[0]
    A, B = w.layer_factors()
    assert A.shape == (ad.d_model, ad.n_kv_heads * ad.head_dim) and B.shape[::-1] == A.shape
    torch.testing.assert_close(A @ B, F_ref[0], atol=1e-10, rtol=0)


def _attention_io(model, ad):
    """Per layer: attention input x, the output projection's output, the module's own A."""
    base = model.base_model
    xs, outs, handles = {}, {}, []
    for k in range(ad.n_layers):
        attn = base.get_submodule(ad.slots()[k])
        o = base.get_submodule(ad.attention_module_output(k))
        handles.append(attn.register_forward_pre_hook(
            lambda m, a, kw, k=k: xs.__setitem__(k, a[0] if a else kw["hidden_states"]), with_kwargs=True))
        handles.append(o.register_forward_hook(lambda m, a, out, k=k: outs.__setitem__(k, out)))
    with torch.no_grad():
        res = base(input_ids=IDS, output_attentions=True)
    for h in handles:
        h.remove()
    return xs, outs, res.attentions


@pytest.mark.parametrize("family", DECLARED_FAMILIES)
def test_attention_probs_and_output_match_the_module(family: str) -> None:
    model = make_model(family)
    ad = get_adapter(model.config)
    xs, outs, attns = _attention_io(model, ad)
    W = read_attention_weights(open_source(model))
    for k in range(ad.n_layers):
        # (b) The modules run their softmax in float32 even in a float64 model: agreement to float32.
        torch.testing.assert_close(attention_probs(xs[k], W[k]), attns[k], atol=1e-6, rtol=0)
        # (c) With the module's own A, the value/output path is exact in float64. Its float32
        # softmax rows sum to 1 only to ~1e-7, so the value bias enters as Σ_j A_ij b_V.
        w, A = W[k], attns[k]
        bias = torch.einsum("hdk,hk->hd", w.W_O, w.b_V[w.kv_index()]) if w.b_V is not None else None
        want = attention_output(xs[k], w, A, bias=False)
        if bias is not None:
            want = want + torch.einsum("bhn,hd->bnd", A.sum(-1), bias)
        if w.b_O is not None:
            want = want + w.b_O
        torch.testing.assert_close(want, outs[k], atol=1e-10, rtol=0)
    if ad.position_kind == "rotary":  # positions really matter: without them the probabilities differ
        import dataclasses

        plain = dataclasses.replace(W[0], positions=None)
        assert (attention_probs(xs[0], plain) - attns[0]).abs().max() > 1e-3


def _own_outputs(model, ad):
    """hidden_states of the model, and every block's raw output (before any final norm)."""
    base = model.base_model
    blocks = ad.blocks(base)
    raw = {}
    handles = [b.register_forward_hook(lambda m, a, o, k=k: raw.__setitem__(k, o[0] if isinstance(o, tuple) else o))
               for k, b in enumerate(blocks)]
    with torch.no_grad():
        hs = base(input_ids=IDS, output_hidden_states=True).hidden_states
    for h in handles:
        h.remove()
    return hs, raw


@pytest.mark.parametrize("family", DECLARED_FAMILIES)
def test_one_collapse_pass_equals_the_models_hidden_states(family: str) -> None:
    model = make_model(family)
    ad = get_adapter(model.config)
    hs, raw = _own_outputs(model, ad)
    looped = LoopedModel(model)
    seen = {}
    with torch.no_grad():
        h0 = looped.embed(IDS)
        final = looped.run_pass(h0, lambda k, s: seen.__setitem__(k, s))
    torch.testing.assert_close(h0, hs[0], atol=1e-12, rtol=0)
    L = ad.n_layers
    for k in range(L):
        torch.testing.assert_close(seen[k], raw[k], atol=1e-10, rtol=0)
    for k in range(L - 1):
        torch.testing.assert_close(seen[k], hs[k + 1], atol=1e-10, rtol=0)
    last = final if ad.final_norm_in_hidden_states else seen[L - 1]
    torch.testing.assert_close(last, hs[L], atol=1e-10, rtol=0)


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gemma2", "opt-postln", "distilbert", "bloom"])
def test_without_ffn_drops_only_the_ffn_term(family: str) -> None:
    """Written out per residual shape from the block's own sub-modules."""
    model = make_model(family)
    ad = get_adapter(model.config)
    base = model.base_model
    looped = LoopedModel(model, ffn=False)
    with torch.no_grad():
        h = looped.embed(IDS)
        inputs = looped.masks(IDS.shape[1], h.dtype, h.device)
        block = looped.blocks[0]
        got = ad.run_block(block, h, inputs[0], ffn=False)
        args = inputs[0].get(h.shape[0]) if hasattr(inputs[0], "get") else inputs[0]  # BLOOM: per batch size
        kw = {k: v for k, v in args[1].items() if k in ("attention_mask", "position_embeddings", "alibi")}
        first = lambda o: o[0] if isinstance(o, tuple) else o  # noqa: E731
        if family == "llama":
            want = h + first(block.self_attn(block.input_layernorm(h), **kw))
        elif family == "gpt_neox":  # parallel: x + attn(ln₁x), the mlp(ln₂x) term dropped
            want = h + first(block.attention(block.input_layernorm(h), **kw))
        elif family == "gemma2":  # sandwich: x + post_attn_norm(attn(ln x))
            want = h + block.post_attention_layernorm(first(block.self_attn(block.input_layernorm(h), **kw)))
        elif family == "bloom":  # its attention module adds the residual itself; its MLP too (dropped)
            want = first(block.self_attention(block.input_layernorm(h), h, **kw))
        elif family == "opt-postln":  # post-LN: LN(x + attn(x)); the FFN and the norm after it dropped
            want = block.self_attn_layer_norm(h + first(block.self_attn(h, **kw)))
        else:
            want = block.sa_layer_norm(h + first(block.attention(h, **kw)))
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
        assert (ad.run_block(block, h, inputs[0], ffn=True) - got).abs().max() > 1e-3
    assert base is model.base_model


@pytest.mark.parametrize("family", DECLARED_FAMILIES)
def test_pre_attention_norm_is_the_models_own(family: str) -> None:
    model = make_model(family)
    ad = get_adapter(model.config)
    name = ad.pre_attention_norm(1)
    with open_source(model).tensors() as get:
        mine = ad.pre_attention_norm_module(1, get)
    if ad.residual in ("post", "norm-after"):  # no norm before attention
        assert name is None and mine is None
        return
    own = model.base_model.get_submodule(name)
    x = torch.randn(3, ad.d_model, dtype=torch.float64)
    assert type(mine) is type(own)
    torch.testing.assert_close(mine.to(torch.float64)(x), own(x), atol=1e-14, rtol=0)


@pytest.mark.parametrize("family", DECLARED_FAMILIES)
def test_steer_save_reload_unsteer_verify(tmp_path: Path, family: str) -> None:
    from steerformer.steering import save_steered, steer, unsteer, unsteer_checkpoint, verify_checkpoint

    head_cls = SPECS[family][2]
    model = make_model(family, head=True)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    ad = get_adapter(model.config)
    F0 = layer_matrices(model, [-1]).matrices[0]
    u = torch.randn(ad.d_model, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    u = u / u.norm()
    rec = steer(model, u, gain=0.5, solve="exact", report=False)
    # F' = F + γ u (Pw)ᵀ with P the projector onto V's row space (docs/math.md §1b), w = u.
    V = read_attention_weights(open_source(model), [ad.n_layers - 1], parts=("vo",))[ad.n_layers - 1].value_matrix()
    P = torch.linalg.pinv(V) @ V
    dF = layer_matrices(model, [-1]).matrices[0] - F0
    torch.testing.assert_close(dF, 0.5 * torch.outer(u, P @ u), atol=1e-9, rtol=0)
    frac = rec.edits[0].solve["written_fraction"]
    assert frac == pytest.approx(float((P @ u).norm()), abs=1e-9)
    rank = ad.n_kv_heads * ad.head_dim
    assert (frac < 0.999) == (rank < ad.d_model)
    out = save_steered(model, tmp_path / "steered")
    loaded = head_cls.from_pretrained(out, attn_implementation="eager",
                                      **({"experts_implementation": "eager"} if family == "mixtral" else {})).eval()
    sd = model.state_dict()
    assert all(torch.equal(sd[k], v) for k, v in loaded.state_dict().items())
    with torch.no_grad():
        a, b = model(input_ids=IDS).logits, loaded(input_ids=IDS).logits
    # Gemma's embed_scale is a non-persistent buffer: √d rounded to float32 in the model built
    # here, exact in the reloaded one; every stored tensor is equal (checked above).
    assert (a - b).abs().max().item() < (1e-5 if family.startswith("gemma") else 1e-10)
    assert verify_checkpoint(out)["ok"]
    unsteer(model)
    assert all(torch.equal(original[k], v) for k, v in model.state_dict().items())
    back = head_cls.from_pretrained(unsteer_checkpoint(out, tmp_path / "restored")).state_dict()
    assert all(torch.equal(original[k], v) for k, v in back.items())


@pytest.mark.parametrize("family", DECLARED_FAMILIES)
def test_analyze_cli_on_saved_checkpoint(tmp_path: Path, family: str) -> None:
    import json

    from steerformer_cli.main import app
    from typer.testing import CliRunner

    make_model(family).save_pretrained(tmp_path / "m")
    res = CliRunner().invoke(app, ["analyze", str(tmp_path / "m"), "--no-plots", "--spectra-only",
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert len(report["layers"]) == family_config(family).num_hidden_layers
    ad = get_adapter(family_config(family))
    assert (report["meta"]["config"]["n_kv_heads"], report["meta"]["config"]["residual"]) == (ad.n_kv_heads, ad.residual)


def test_masked_lm_price_uses_the_tokenizers_mask_id() -> None:
    from steerformer.steering.measure import mask_token_id, outputs
    from steerformer.prompts import PromptBatch

    model = make_model("roberta", head=True)

    class Tok:
        mask_token_id = 5

    assert mask_token_id(model, Tok()) == 5
    assert mask_token_id(model, None) is None  # no guess: 103 is an ordinary RoBERTa token
    batch = PromptBatch(IDS, torch.ones_like(IDS))
    out = outputs(model, batch, Tok())
    assert out.kind == "masked-token" and out.logp is not None
    ids = IDS.clone()
    ids[:, 1::4] = 5
    with torch.no_grad():
        want = torch.log_softmax(model(input_ids=ids).logits[:, 1::4].reshape(-1, DECLARED_VOCAB).double(), -1)
    torch.testing.assert_close(out.logp, want, atol=1e-12, rtol=0)
    assert outputs(model, batch, None).logp is None


def test_opt_350m_layout_is_refused_clearly() -> None:
    from steerformer.errors import UnsupportedModelError

    cfg = family_config("opt")
    cfg.word_embed_proj_dim = 16
    with pytest.raises(UnsupportedModelError, match="word_embed_proj_dim=16"):
        get_adapter(cfg)


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_neox", "roberta"])
def test_every_feature_runs(family: str) -> None:
    """Statistics (dynamics with the model's own norm, full model, cumulative), collapse in the
    four variants, steering with the min-norm solve and its full report: run, finite numbers."""
    import math

    from steerformer.collapse import collapse
    from steerformer.dynamics import run_dynamics
    from steerformer.stats.full_model import model_hidden_states
    from steerformer.steering import steer

    model = make_model(family, head=True)
    ad = get_adapter(model.config)
    traj = run_dynamics(model, n_prompts=3, n_tokens=6, layer_norm=True, bias=True)
    assert bool(torch.isfinite(traj.states).all())
    hs = model_hidden_states(model, input_ids=IDS.tolist())
    assert hs.states.shape[0] == ad.n_layers + 1
    for weights in ("pretrained", "random-per-pass"):
        for ffn in (True, False):
            res = collapse(model, token_ids=IDS, passes=2, ffn=ffn, weights=weights)
            assert res.e.shape[:2] == (2, ad.n_layers) and bool((res.e >= 0).all())
    model = make_model(family, head=True)
    u = torch.randn(ad.d_model, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    rec = steer(model, u, solve="min-norm", prompts=IDS.repeat(3, 1), heldout_prompts=IDS[:, :5],
                target_alignment=0.5, dynamics_n_prompts=3, dynamics_tokens=5)
    assert rec.edits[0].solve["method"] == "ridge" and math.isfinite(rec.gain)
    assert rec.kl_kind == ("next-token" if ad.residual != "post" else None)  # no tokenizer: no mask id, no KL


def test_models_command_lists_every_family() -> None:
    import json

    from steerformer_cli.main import app
    from typer.testing import CliRunner

    from steerformer.adapters import ADAPTERS

    res = CliRunner().invoke(app, ["models", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["model_type"]: r for r in json.loads(res.stdout)}
    assert set(rows) == set(ADAPTERS)
    assert (rows["llama"]["heads"], rows["llama"]["positions"], rows["llama"]["norm"]) == ("grouped-query", "rotary", "rmsnorm")
    assert (rows["gpt_neox"]["residual"], rows["gpt_neox"]["qkv_layout"]) == ("parallel", "interleaved")
    assert rows["bert"]["residual"] == "post" and rows["gemma2"]["norm"] == "rmsnorm+1"


# Grouped-query layers with a value bias: b_V is stored per KV head, the row a = wᵀV⁺ (or uᵀW_O) has
# one block per query head. Found after the merge: ablation and lazy steering paired them wrongly.
GQA_BIASED = ["falcon", "gpt_bigcode", "llama", "phi", "qwen2", "starcoder2"]


def _raw_value_bias(model, family: str) -> torch.Tensor:
    """b_V repeated per query head, built here from the stored module, not by the library."""
    ad = get_adapter(model.config)
    w = read_attention_weights(open_source(model), [ad.n_layers - 1], parts=("vo",))[ad.n_layers - 1]
    H, G = ad.n_heads, ad.n_kv_heads
    return w.b_V.repeat_interleave(H // G, dim=0).reshape(-1)  # heads of one KV head are consecutive


@pytest.mark.parametrize("family", [f for f in GQA_BIASED if f in DECLARED_FAMILIES])
def test_ablate_and_lazy_steer_on_grouped_query_layers_with_value_bias(tmp_path: Path, family: str) -> None:
    from steerformer.steering import steer
    from steerformer.steering import ablate
    from steerformer.steering import steer_checkpoint

    model = make_model(family)
    ad = get_adapter(model.config)
    u = torch.randn(ad.d_model, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    u = u / u.norm()
    b = _raw_value_bias(model, family)
    rec = ablate(model, u, layers=[ad.n_layers - 1], report=False)
    e = rec.edits[0]
    assert e.bias_coef == pytest.approx(float(e.a @ b), rel=1e-12, abs=1e-12)
    from steerformer.steering import unsteer

    unsteer(model)  # back to the original weights for the lazy path
    model.save_pretrained(tmp_path / "orig")
    lazy = steer_checkpoint(tmp_path / "orig", tmp_path / "lazy", u, gain=0.5, solve="exact", card=False)
    mem = steer(model, u, gain=0.5, solve="exact", report=False)
    assert lazy.edits[0].bias_coef == pytest.approx(mem.edits[0].bias_coef, rel=1e-12, abs=1e-12)
    assert mem.edits[0].bias_coef == pytest.approx(float(mem.edits[0].a @ b), rel=1e-12, abs=1e-12)


def test_eigvec_direction_is_numbered_like_the_nonzero_spectrum() -> None:
    # Found after the merge: on a layer of rank r < d, --eigvec K counted F's d − r null-space zeros
    # (sitting between the positive and negative eigenvalues), so K pointed at rounding noise.
    import numpy as np

    from steerformer.steering.sources import resolve_direction

    model = make_model("mistral")
    ad = get_adapter(model.config)
    L = ad.n_layers - 1
    assert ad.n_kv_heads * ad.head_dim < ad.d_model  # the case this test is about
    F = layer_matrices(model, [L]).matrices[0].numpy()
    lam, vecs = np.linalg.eig(F)  # independent: numpy's eig, drop the null space, sort by real part
    keep = np.abs(lam) > 1e-8 * np.abs(lam).max()
    order = np.argsort(-lam[keep].real, kind="stable")
    lam_nz, vec_nz = lam[keep][order], vecs[:, keep][:, order]
    assert len(lam_nz) == ad.n_kv_heads * ad.head_dim
    for k in (0, len(lam_nz) // 2, len(lam_nz) - 1):
        u, src = resolve_direction(model, open_source(model), L, eigvec=k)
        got = complex(*src.detail["eigenvalue"])
        assert abs(got - lam_nz[k]) <= 1e-9 * abs(lam_nz[0])
        if abs(lam_nz[k].imag) < 1e-12:  # a real eigenvector: u spans the same line
            v = vec_nz[:, k].real
            assert abs(float(u.numpy() @ v)) / np.linalg.norm(v) > 1 - 1e-6
