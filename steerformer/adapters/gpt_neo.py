"""GPT-Neo: separate bias-free q/k/v projections, unscaled scores, global and local layers."""

from __future__ import annotations

from typing import Sequence

import torch

from .base import Adapter, AttentionWeights, first_output, MaskSpec, Part, TensorGetter, split_heads_out_in, split_output_heads


class GPTNeoAdapter(Adapter):
    model_type = "gpt_neo"
    base_model_prefix = "transformer"

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

    def output_weight_to_stored(self, W_O: torch.Tensor) -> torch.Tensor:
        return W_O

    def output_weight_from_stored(self, stored: torch.Tensor) -> torch.Tensor:
        return stored

    def pre_attention_norm(self, layer: int) -> str | None:
        return f"h.{self.layer_sequence()[layer]}.ln_1"

    def attention_module_output(self, slot: int) -> str:
        return self.slots()[slot]

    # ---- block-by-block execution ------------------------------------------------------------
    def embed(self, base: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[-1], device=input_ids.device)[None]
        return base.drop(base.wte(input_ids) + base.wpe(pos))  # dropout: identity in eval mode

    def blocks(self, base: torch.nn.Module) -> list[torch.nn.Module]:
        return [base.h[s] for s in self.layer_sequence()]

    def final_norm(self, base: torch.nn.Module) -> torch.nn.Module | None:
        return base.ln_f

    def run_block(self, block: torch.nn.Module, hidden: torch.Tensor, mask: torch.Tensor | None,
                  *, ffn: bool = True) -> torch.Tensor:
        if ffn:
            return first_output(block(hidden, attention_mask=mask))
        # Pre-LN: x + attn(ln_1 x); the FFN, its norm ln_2 and its residual are all dropped.
        return hidden + first_output(block.attn(block.ln_1(hidden), attention_mask=mask))

    def layer_block(self, slot: int) -> str:
        return f"h.{slot}"  # the attention slot is h.{i}.attn.attention, two levels down
