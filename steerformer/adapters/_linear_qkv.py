"""Shared reader for encoders whose q/k/v/output projections are biased ``nn.Linear`` layers
(BERT, ALBERT): only the module paths differ."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from .base import Adapter, AttentionWeights, first_output, MaskSpec, Part, TensorGetter, split_heads_bias, split_heads_out_in, split_output_heads


class LinearQKVEncoderAdapter(Adapter):
    """Subclasses give ``_names(slot)`` → (query, key, value, output) module paths."""

    @property
    def d_model(self) -> int:
        return int(self.config.hidden_size)

    @property
    def n_heads(self) -> int:
        return int(self.config.num_attention_heads)

    def _names(self, slot: int) -> tuple[str, str, str, str]:
        raise NotImplementedError

    def mask(self, layer: int) -> MaskSpec:
        return MaskSpec("full")

    def scale(self, layer: int) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def read_attention(self, layer: int, get: TensorGetter, parts: Sequence[Part] = ("qk", "vo")) -> AttentionWeights:
        q, k, v, o = self._names(self.layer_sequence()[layer])
        H = self.n_heads
        out = AttentionWeights(
            W_V=split_heads_out_in(get(f"{v}.weight"), H), b_V=split_heads_bias(get(f"{v}.bias"), H),
            W_O=split_output_heads(get(f"{o}.weight"), H), b_O=get(f"{o}.bias"),
            scale=self.scale(layer), mask=self.mask(layer),
        )
        if "qk" in parts:
            out.W_Q, out.b_Q = split_heads_out_in(get(f"{q}.weight"), H), split_heads_bias(get(f"{q}.bias"), H)
            out.W_K, out.b_K = split_heads_out_in(get(f"{k}.weight"), H), split_heads_bias(get(f"{k}.bias"), H)
        return out

    def output_weight_name(self, slot: int) -> str:
        return f"{self._names(slot)[3]}.weight"

    def attention_module_output(self, slot: int) -> str:
        return self._names(slot)[3]

    def run_block(self, block: torch.nn.Module, hidden: torch.Tensor, mask: torch.Tensor | None,
                  *, ffn: bool = True) -> torch.Tensor:
        if ffn:
            return first_output(block(hidden, mask))
        # Post-LN has no separate FFN input norm: "without FFN" keeps the attention sublayer with its
        # own residual and LayerNorm, LN(x + attn(x)), and drops the FFN, its residual and the
        # LayerNorm that follows it (BERT output.LayerNorm, ALBERT full_layer_layer_norm).
        return first_output(block.attention(hidden, mask))
