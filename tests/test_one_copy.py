"""Issue 12 item 4: one PromptBatch that never mutates a tokenizer; one discrete map; one source
helper; attention weights read once per (layer, parts)."""

from __future__ import annotations

import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from steerformer.prompts import PromptBatch


def _gpt2_like_tokenizer(padding_side: str = "right") -> PreTrainedTokenizerFast:
    """A character tokenizer with an end-of-text token and no pad token, like GPT-2's."""
    chars = list("abcdefghijklmnopqrstuvwxyz .")
    vocab = {"<eos>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", padding_side=padding_side)


def test_prompt_batch_leaves_the_tokenizer_unchanged() -> None:
    tok = _gpt2_like_tokenizer()
    assert tok.pad_token is None
    before = set(tok.__dict__), dict(tok.special_tokens_map), tok.pad_token, tok.pad_token_id, tok.padding_side
    batch = PromptBatch.from_texts(["ab", "c d."], tok)
    assert (set(tok.__dict__), dict(tok.special_tokens_map), tok.pad_token, tok.pad_token_id, tok.padding_side) == before
    assert tok.pad_token is None
    # "c d." is 4 characters: ids 3, 27, 4, 28; "ab" is 1, 2 padded on the right with <eos> = 0.
    assert batch.input_ids.tolist() == [[1, 2, 0, 0], [3, 27, 4, 28]]
    assert batch.attention_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch.rows() == [[1, 2], [3, 27, 4, 28]]


def test_prompt_batch_pads_on_the_tokenizer_side() -> None:
    batch = PromptBatch.from_texts(["ab", "abc"], _gpt2_like_tokenizer("left"))
    assert batch.input_ids.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert batch.attention_mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert batch.rows() == [[1, 2], [1, 2, 3]]


def test_steering_encode_leaves_the_tokenizer_unchanged() -> None:
    from steerformer.steering.measure import encode
    from tests.tiny_models import make_model

    tok = _gpt2_like_tokenizer()
    batch = encode(make_model("gpt2"), ["a cat", "b"], tok)
    assert tok.pad_token is None
    assert batch.input_ids.tolist() == [[1, 27, 3, 1, 20], [2, 0, 0, 0, 0]]


def test_dynamics_step_and_discrete_step_are_one_map() -> None:
    """With full-rank heads and no masks/scale/bias the model-side step and the ODE module's step
    are the same map; both equal a transcription of x⁺ = N(x + τ Σ_h F_h A_h x)."""
    import steerformer.discrete as discrete
    from steerformer.ode.fields import discrete_step

    g = torch.Generator().manual_seed(3)
    d, h, n = 4, 2, 5
    y = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    P = torch.randn(h, d, d, generator=g, dtype=torch.float64) / 3
    U = torch.randn(h, d, d, generator=g, dtype=torch.float64) / 3
    A = torch.softmax(torch.einsum("bid,hde,bje->bhij", y, P, y), dim=-1)
    z = y + 0.5 * torch.einsum("bhij,hed,bjd->bie", A, U, y)
    want = z / z.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(discrete_step(y, P, U, tau=0.5, normalization="softmax"), want, rtol=0, atol=1e-14)
    calls = []
    real = discrete.residual_map
    import steerformer.ode.fields as fields

    fields.residual_map = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        discrete_step(y, P, U, tau=0.5, normalization="softmax")
    finally:
        fields.residual_map = real
    assert calls == [1]
    import steerformer.dynamics as dyn

    assert dyn.residual_map is real and fields.residual_map is real


def test_as_source_passes_a_source_through(tmp_path) -> None:
    from steerformer.loading import ModelSource, as_source
    from tests.tiny_models import make_model

    model = make_model("gpt2")
    src = as_source(model)
    assert isinstance(src, ModelSource) and as_source(src) is src and src.model is model


def test_power_method_stats_reads_each_attention_tensor_once(tmp_path, monkeypatch) -> None:
    """From a checkpoint folder, layer_matrices and the dynamics share one read of V/O (and Q/K)."""
    from collections import Counter

    from steerformer.loading import SafetensorsReader, open_source
    from steerformer.matrices import layer_matrices
    from steerformer.stats.run import power_method_stats
    from tests.tiny_models import make_model

    make_model("gpt2", dtype=torch.float32).save_pretrained(tmp_path)
    reads: Counter = Counter()
    real = SafetensorsReader.get
    monkeypatch.setattr(SafetensorsReader, "get", lambda self, key: reads.update([key]) or real(self, key))
    source = open_source(tmp_path)
    rep = power_method_stats(source, n_prompts=2, n_tokens=3, prompts=None, null_draws=0)
    attn = {k: n for k, n in reads.items() if ".attn." in k}
    assert attn and set(attn.values()) == {1}, attn
    # The numbers are those of a fresh, uncached read.
    fresh = layer_matrices(tmp_path)
    torch.testing.assert_close(layer_matrices(source).matrices, fresh.matrices, rtol=0, atol=0)
    assert rep is not None


def test_steer_reads_each_layers_attention_once(monkeypatch) -> None:
    """steer reads V/O for the eigenvector, the edit and the dynamics probe: one read per layer per
    call (memoized on the call's source); the numbers equal those of an unmemoized call."""
    from collections import Counter

    from steerformer.adapters import get_adapter
    from steerformer.steering import steer
    from tests.tiny_models import make_model

    kw = dict(eigvec=0, layer=1, measure="dynamics", solve="exact", target_alignment=0.5, dynamics_n_prompts=3,
              dynamics_tokens=4)
    plain = steer(make_model("gpt2"), **kw)
    model = make_model("gpt2")
    cls = type(get_adapter(model.config))
    reads: Counter = Counter()
    real = cls.read_attention
    monkeypatch.setattr(cls, "read_attention", lambda self, k, get, parts=("qk", "vo"): reads.update([k]) or
                        real(self, k, get, parts))
    rec = steer(model, **kw)
    assert reads and set(reads.values()) == {1}, reads
    assert rec.gain == plain.gain and rec.alignment_dynamics_after == plain.alignment_dynamics_after
