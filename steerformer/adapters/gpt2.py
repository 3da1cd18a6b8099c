"""GPT-2: fused ``c_attn`` QKV projection, causal mask, pre-attention ``ln_1``."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ._decoder import PreLNDecoderAdapter
from .base import (
    AttentionWeights, MaskSpec, Part, TensorGetter, Writer, split_heads_bias, split_heads_out_in, split_output_heads,
)


class GPT2Adapter(PreLNDecoderAdapter):
    model_type = "gpt2"
    qkv_layout = "fused"  # c_attn holds [Q|K|V] column blocks (Conv1D, (in, out))
    block_writer_specs = (Writer("attention", "attn.c_proj", layout="in_out", bias=True),
                          Writer("mlp", "mlp.c_proj", layout="in_out", bias=True))

    @property
    def d_model(self) -> int:
        return int(self.config.n_embd)

    @property
    def n_heads(self) -> int:
        return int(self.config.n_head)

    def slots(self) -> list[str]:
        return [f"h.{i}.attn" for i in range(self.config.n_layer)]

    def mask(self, layer: int) -> MaskSpec:
        return MaskSpec("causal")

    def scale(self, layer: int) -> float:
        s = 1.0 / math.sqrt(self.head_dim) if getattr(self.config, "scale_attn_weights", True) else 1.0
        if getattr(self.config, "scale_attn_by_inverse_layer_idx", False):
            s /= float(layer + 1)
        return s

    def read_attention(self, layer: int, get: TensorGetter, parts: Sequence[Part] = ("qk", "vo")) -> AttentionWeights:
        slot, d, H = self.slots()[self.layer_sequence()[layer]], self.d_model, self.n_heads
        # Conv1D stores (in, out) and computes y = x W + b; transpose once to (out, in).
        w_qkv = get(f"{slot}.c_attn.weight").T
        b_qkv = get(f"{slot}.c_attn.bias")
        W = {name: split_heads_out_in(w_qkv[k * d:(k + 1) * d], H) for k, name in enumerate("QKV")}
        b = {name: split_heads_bias(b_qkv[k * d:(k + 1) * d], H) for k, name in enumerate("QKV")}
        out = AttentionWeights(
            W_V=W["V"], b_V=b["V"],
            W_O=split_output_heads(self.output_weight_from_stored(get(f"{slot}.c_proj.weight")), H),
            b_O=get(f"{slot}.c_proj.bias"),
            scale=self.scale(layer), mask=self.mask(layer),
        )
        if "qk" in parts:
            out.W_Q, out.b_Q, out.W_K, out.b_K = W["Q"], b["Q"], W["K"], b["K"]
        return out

    def output_weight_name(self, slot: int) -> str:
        return f"{self.slots()[slot]}.c_proj.weight"

    def output_weight_to_stored(self, W_O: torch.Tensor) -> torch.Tensor:
        return W_O.T  # Conv1D (in, out)

    def output_weight_from_stored(self, stored: torch.Tensor) -> torch.Tensor:
        return stored.T
