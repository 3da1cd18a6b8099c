"""BERT (post-LN encoder, full attention)."""

from __future__ import annotations

import torch

from ._linear_qkv import LinearQKVEncoderAdapter


class BertAdapter(LinearQKVEncoderAdapter):
    model_type = "bert"
    base_model_prefix = "bert"
    residual = "post"

    def slots(self) -> list[str]:
        return [f"encoder.layer.{i}.attention" for i in range(self.config.num_hidden_layers)]

    def _names(self, slot: int) -> tuple[str, str, str, str]:
        p = self.slots()[slot]
        return f"{p}.self.query", f"{p}.self.key", f"{p}.self.value", f"{p}.output.dense"

    def embed(self, base: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        return base.embeddings(input_ids=input_ids)  # word + position + token type 0, LayerNorm

    def blocks(self, base: torch.nn.Module) -> list[torch.nn.Module]:
        return [base.encoder.layer[s] for s in self.layer_sequence()]
