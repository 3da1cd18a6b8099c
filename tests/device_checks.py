"""Helpers of the device tests: tiny checkpoints on disk and a comparison of two results' numbers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch


def save_tiny_llama(path: Path, *, seed: int = 0) -> Path:
    """A 2-layer grouped-query Llama (d = 64, 4 heads, 2 KV heads: factored spectra, r = 32 < d)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=101, max_position_embeddings=64, bos_token_id=0,
                      eos_token_id=0, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # wider than the init, so attention is far from uniform
        for name, p in model.named_parameters():
            if p.ndim == 2 and "embed" not in name:
                p.normal_(0.0, 0.3)
    model.save_pretrained(path)
    return path


def assert_same_numbers(a: Any, b: Any, *, rtol: float = 1e-12, atol: float = 1e-12, where: str = "") -> None:
    """Every number in ``a`` equals the one at the same place in ``b`` (NaN = NaN); strings and
    booleans equal; the same keys and lengths."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_same_numbers(a[k], b[k], rtol=rtol, atol=atol, where=f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: lengths {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_numbers(x, y, rtol=rtol, atol=atol, where=f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        x, y = float(a), float(b)
        assert (math.isnan(x) and math.isnan(y)) or abs(x - y) <= atol + rtol * abs(y), f"{where}: {x} vs {y}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"
