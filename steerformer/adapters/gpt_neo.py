"""GPT-Neo: separate bias-free q/k/v projections, unscaled scores, global and local layers."""

from __future__ import annotations

from typing import Sequence

from ._decoder import PreLNDecoderAdapter
from .base import AttentionWeights, MaskSpec, Part, TensorGetter, Writer, split_heads_out_in, split_output_heads


class GPTNeoAdapter(PreLNDecoderAdapter):
    model_type = "gpt_neo"
    block_writer_specs = (Writer("attention", "attn.attention.out_proj", bias=True), Writer("mlp", "mlp.c_proj", bias=True))

    @property
    def d_model(self) -> int:
        return int(self.config.hidden_size)

    @property
    def n_heads(self) -> int:
        return int(self.config.num_heads)

    def slots(self) -> list[str]:
        return [f"h.{i}.attn.attention" for i in range(self.config.num_layers)]

    def mask(self, layer: int) -> MaskSpec:
        if self.config.attention_layers[layer] == "local":
            return MaskSpec("causal_local", window=int(self.config.window_size))
        return MaskSpec("causal")

    def scale(self, layer: int) -> float:
        return 1.0  # GPT-Neo does not divide its attention scores by sqrt(d_h)

    def read_attention(self, layer: int, get: TensorGetter, parts: Sequence[Part] = ("qk", "vo")) -> AttentionWeights:
        slot, H = self.slots()[self.layer_sequence()[layer]], self.n_heads
        out = AttentionWeights(
            W_V=split_heads_out_in(get(f"{slot}.v_proj.weight"), H), b_V=None,
            W_O=split_output_heads(get(f"{slot}.out_proj.weight"), H), b_O=get(f"{slot}.out_proj.bias"),
            scale=self.scale(layer), mask=self.mask(layer),
        )
        if "qk" in parts:
            out.W_Q = split_heads_out_in(get(f"{slot}.q_proj.weight"), H)
            out.W_K = split_heads_out_in(get(f"{slot}.k_proj.weight"), H)
        return out

    def output_weight_name(self, slot: int) -> str:
        return f"{self.slots()[slot]}.out_proj.weight"
