"""Shared shape of the pre-LN decoders GPT-2 and GPT-Neo: blocks ``h.{i}`` with ``ln_1`` before
attention, token + position embeddings ``wte``/``wpe``, final ``ln_f``. Only their attention
modules differ (fused Conv1D vs separate Linear projections, scale, local windows)."""

from __future__ import annotations

import torch

from .base import Adapter, first_output, Writer


class PreLNDecoderAdapter(Adapter):
    base_model_prefix = "transformer"
    embedding_writer_specs = (Writer("embedding", "wte", layout="in_out"), Writer("positions", "wpe", layout="in_out"))

    def pre_attention_norm(self, layer: int) -> str | None:
        return f"h.{self.layer_sequence()[layer]}.ln_1"

    def attention_module_output(self, slot: int) -> str:
        return self.slots()[slot]

    def layer_block(self, slot: int) -> str:
        return f"h.{slot}"

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
