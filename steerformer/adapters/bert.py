"""BERT (post-LN encoder, full attention)."""

from __future__ import annotations

import torch

from ._linear_qkv import LinearQKVEncoderAdapter
from .base import Writer


class BertAdapter(LinearQKVEncoderAdapter):
    model_type = "bert"
    base_model_prefix = "bert"
    residual = "post"
    block_writer_specs = (Writer("attention", "attention.output.dense", bias=True), Writer("mlp", "output.dense", bias=True))
    # word + position + token-type embeddings, then a LayerNorm, enter the first block
    embedding_writer_specs = tuple(Writer(kind, f"embeddings.{name}", layout="in_out", norm="embeddings.LayerNorm",
                                          norm_kind="layernorm")
                                   for kind, name in (("embedding", "word_embeddings"), ("positions", "position_embeddings"),
                                                      ("token_type", "token_type_embeddings")))

    def slots(self) -> list[str]:
        return [f"encoder.layer.{i}.attention" for i in range(self.config.num_hidden_layers)]

    def _names(self, slot: int) -> tuple[str, str, str, str]:
        p = self.slots()[slot]
        return f"{p}.self.query", f"{p}.self.key", f"{p}.self.value", f"{p}.output.dense"

    def embed(self, base: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        return base.embeddings(input_ids=input_ids)  # word + position + token type 0, LayerNorm

    def blocks(self, base: torch.nn.Module) -> list[torch.nn.Module]:
        return [base.encoder.layer[s] for s in self.layer_sequence()]
