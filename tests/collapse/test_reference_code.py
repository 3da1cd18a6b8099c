"""Collapse against the reference code (cyphylab/GPT-Consensus, GPTConsensus.py): the signed E,
E in the states' precision (--e-precision states), and the no-FFN random-per-pass stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2Model

from steerformer.collapse import collapse
from steerformer.collapse.metrics import consensus_stats
from steerformer.errors import InvalidArgumentError

DOCS = __import__("pathlib").Path(__file__).resolve().parents[2] / "docs"


def _gpt2(seed: int = 0) -> GPT2Model:
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=3, n_embd=32, n_head=4, vocab_size=101, n_positions=32, bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "eager"
    return GPT2Model(cfg).eval()


def _reference_loop(model: GPT2Model, ids: torch.Tensor, passes: int, seed: int = 42) -> np.ndarray:
    """A transcription of GPTConsensus.py (--noff --fullrandom): one re-initialization of the full
    model, then ``patch_skip_mlp``; per pass every block, E after each, ``ln_f``; before the next
    pass ``torch.manual_seed(SEED + i + 1)``, ``model.apply(model._init_weights)``, patch again.
    Two changes, both forced by transformers 5: the ``_is_hf_initialized`` marks are cleared before
    each re-initialization, and each block gets the causal mask (a block called alone no longer
    builds one)."""

    class ZeroMLP(torch.nn.Module):
        def forward(self, hidden_states, **kwargs):
            return torch.zeros_like(hidden_states)

    def patch_skip_mlp(m):
        for block in m.h:
            block.ln_2 = torch.nn.Identity()
            block.mlp = ZeroMLP()

    def reset(m):
        for obj in [*m.modules(), *m.parameters(), *m.buffers()]:
            if getattr(obj, "_is_hf_initialized", False):
                obj._is_hf_initialized = False
        m.apply(m._init_weights)

    torch.manual_seed(seed)
    reset(model)
    patch_skip_mlp(model)
    B, T = ids.shape
    hidden = model.wte(ids) + model.wpe(torch.arange(T).unsqueeze(0))
    mask = torch.zeros(T, T).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), torch.finfo(torch.float32).min)
    L = len(model.h)
    diag = torch.zeros((B, passes * L + 1), dtype=torch.float32)
    for b in range(B):
        hn = hidden[b]
        y1 = hn / hn.norm(dim=1, keepdim=True)
        diag[b, 0] = 1 - (y1[0] @ y1.T).mean()
    for i in range(passes):
        idx = 1 + i * L
        for layer_idx, block in enumerate(model.h):
            out = block(hidden, attention_mask=mask[None, None])
            hidden = out[0] if isinstance(out, (tuple, list)) else out
            for b in range(B):
                hn = hidden[b]
                y1 = hn / hn.norm(dim=1, keepdim=True)
                diag[b, idx + layer_idx] = 1 - (y1[0] @ y1.T).mean()
        hidden = model.ln_f(hidden)
        if i != passes - 1:
            torch.manual_seed(seed + i + 1)
            reset(model)
            patch_skip_mlp(model)
    return diag.numpy()


@torch.no_grad()
def test_no_ffn_random_per_pass_is_the_reference_stream() -> None:
    ids = torch.as_tensor(np.random.default_rng(1).integers(0, 101, size=(3, 12)))
    ref = _reference_loop(_gpt2(), ids, passes=3)
    res = collapse(_gpt2(), token_ids=ids.numpy(), passes=3, ffn=False, weights="random-per-pass",
                   e_precision="states")
    ours = np.concatenate([res.e0[:, None], res.e.transpose(2, 0, 1).reshape(3, -1)], axis=1)
    np.testing.assert_array_equal(ours, ref)
    # The order matters: re-drawing the MLPs too (the library before this fix) changes E from pass 2.
    from steerformer.collapse import run as run_mod

    orig = run_mod.ffn_modules
    run_mod.ffn_modules = lambda looped: None
    try:
        old = collapse(_gpt2(), token_ids=ids.numpy(), passes=3, ffn=False, weights="random-per-pass",
                       e_precision="states")
    finally:
        run_mod.ffn_modules = orig
    np.testing.assert_array_equal(old.e[0], res.e[0])
    assert np.abs(old.e[1:] - res.e[1:]).max() > 1e-4


def test_e_is_signed_as_in_the_reference_and_texts_say_so(tmp_path) -> None:
    # Tokens with negative cosines: the signed mean differs from the mean of |cos|.
    y = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    e, _, _ = consensus_stats(y)
    assert float(e[0]) == pytest.approx(1 - (1 - 1 + 0) / 3)  # 1.0; the |cos| form would give 1/3
    res = collapse(_gpt2(), token_ids=np.arange(12).reshape(2, 6), passes=1, out=tmp_path / "r")
    text = res.meta["e_definition"]
    assert "signed" in text and "1 - (y1[0] @ y1.T).mean()" in text and "|cos|" not in text
    doc = (DOCS / "collapse.md").read_text()
    assert "averages |cos|" not in doc and "1 - (y1[0] @ y1.T).mean()" in doc


def test_e_precision_states_reads_the_fp16_floor() -> None:
    # A true E of ~1e-6: float64 reports it, fp16 arithmetic reads 0 or ~5e-4 (the paper's floor).
    g = torch.Generator().manual_seed(0)
    base = torch.randn(64, generator=g, dtype=torch.float64)
    h = base + 1.4e-3 * torch.randn(4, 50, 64, generator=g, dtype=torch.float64) * base.norm() / 8
    true = consensus_stats(h)[0]
    assert 1e-7 < float(true.min()) and float(true.max()) < 1e-5
    e16 = consensus_stats(h.half(), "states")[0]
    assert e16.dtype == torch.float32
    assert all(float(v) == 0.0 or abs(float(v)) > 1e-4 for v in e16)
    e64 = consensus_stats(h.half(), "float64")[0]
    np.testing.assert_allclose(e64.numpy(), consensus_stats(h.half().double())[0].numpy(), rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="e_precision=.*float64, states"):
        consensus_stats(h, "fp16")


def test_e_precision_is_recorded_and_resume_compares_it(tmp_path) -> None:
    ids = np.arange(12).reshape(2, 6)
    res = collapse(_gpt2(), token_ids=ids, passes=1, out=tmp_path / "r", e_precision="states")
    assert res.options["e_precision"] == "states"
    with pytest.raises(InvalidArgumentError, match="e_precision='states'/'float64'"):
        collapse(_gpt2(), token_ids=ids, passes=2, out=tmp_path / "r", resume=True)
