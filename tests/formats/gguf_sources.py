"""A tiny random Llama, and a source GGUF for it written by hand with the ``gguf`` writer.

The source GGUF carries llama.cpp's metadata keys and a small byte-level vocabulary, and tensors
of the right names and shapes but unrelated values (zeros): steerformer replaces every tensor, so
a logit match after the round trip can only come from the model's own weights. The tensor names
are spelled out here, independently of steerformer's name mapping.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 300


def tiny_llama(seed: int = 0, *, tie: bool = True, kv_heads: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=128,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tie, bos_token_id=1,
                         eos_token_id=2, attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1 so that a lost norm shows
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.uniform_(0.5, 1.5)
    return model


def _byte_tokens() -> list[str]:
    """GPT-2's printable spelling of the 256 bytes, then filler tokens up to VOCAB."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    spelled, n = {}, 0
    for b in range(256):
        if b in keep:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + n)
            n += 1
    tokens = [spelled[b] for b in range(256)]
    return tokens + [f"<x{i}>" for i in range(VOCAB - len(tokens))]


def add_byte_tokenizer(w, tokens: list[str]) -> None:
    """A GPT-2-style byte tokenizer (``tokens``, two merges, bos 1, eos 2) in GGUF writer ``w``."""
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * len(tokens))
    w.add_array("tokenizer.ggml.merges", ["Ġ t", "h e"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)


def write_llama_source(path: Path, model: LlamaForCausalLM) -> Path:
    """A llama-architecture GGUF with the model's shapes and llama.cpp's keys, tensors all zero."""
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_uint32("llama.context_length", c.max_position_embeddings)
    w.add_uint32("llama.embedding_length", c.hidden_size)
    w.add_uint32("llama.block_count", c.num_hidden_layers)
    w.add_uint32("llama.feed_forward_length", c.intermediate_size)
    w.add_uint32("llama.rope.dimension_count", c.hidden_size // c.num_attention_heads)
    w.add_uint32("llama.attention.head_count", c.num_attention_heads)
    w.add_uint32("llama.attention.head_count_kv", c.num_key_value_heads)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_uint32("llama.vocab_size", c.vocab_size)
    w.add_uint32("general.file_type", 0)
    add_byte_tokenizer(w, _byte_tokens())
    d, f, v = c.hidden_size, c.intermediate_size, c.vocab_size
    dh = d // c.num_attention_heads
    kv = c.num_key_value_heads * dh
    zeros = lambda *shape: np.zeros(shape, dtype=np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", zeros(v, d))
    for i in range(c.num_hidden_layers):
        for name, shape in (("attn_norm", (d,)), ("attn_q", (d, d)), ("attn_k", (kv, d)), ("attn_v", (kv, d)),
                            ("attn_output", (d, d)), ("ffn_norm", (d,)), ("ffn_gate", (f, d)), ("ffn_up", (f, d)),
                            ("ffn_down", (d, f))):
            w.add_tensor(f"blk.{i}.{name}.weight", zeros(*shape))
    w.add_tensor("output_norm.weight", zeros(d))
    if not c.tie_word_embeddings:
        w.add_tensor("output.weight", zeros(v, d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_chat_gguf(path: Path) -> Path:
    """A 3-layer random Llama GGUF that transformers' GGUF loader converts whole: random weights, the
    256 byte tokens plus the two merges' results and two chat markers (bos/eos), and a ChatML
    chat template — a real (tiny) chat model for the conversion cache, the CLI and ``chat``."""
    import gguf

    d, f, layers, heads, kv = 64, 96, 3, 4, 2
    tokens = _byte_tokens()[:256] + ["Ġt", "he", "<|im_start|>", "<|im_end|>"]
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path.with_suffix(".tmp")), "llama")
    for key, value in (("context_length", 256), ("embedding_length", d), ("block_count", layers),
                       ("feed_forward_length", f), ("rope.dimension_count", d // heads),
                       ("attention.head_count", heads), ("attention.head_count_kv", kv), ("vocab_size", len(tokens))):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * 258 + [3, 3])
    w.add_array("tokenizer.ggml.merges", ["Ġ t", "h e"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 258)
    w.add_uint32("tokenizer.ggml.eos_token_id", 259)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    dh = d // heads
    rand = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", rand(len(tokens), d))
    for i in range(layers):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (kv * dh, d)), ("attn_v", (kv * dh, d)),
                            ("attn_output", (d, d)), ("ffn_gate", (f, d)), ("ffn_up", (f, d)), ("ffn_down", (d, f))):
            w.add_tensor(f"blk.{i}.{name}.weight", rand(*shape))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    path.with_suffix(".tmp").rename(path)
    return path
