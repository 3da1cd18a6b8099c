"""ALBERT: layers share weights through ``num_hidden_groups`` groups of ``inner_group_num`` layers."""

from __future__ import annotations

import torch

from ._linear_qkv import LinearQKVEncoderAdapter
from .base import Writer


class AlbertAdapter(LinearQKVEncoderAdapter):
    model_type = "albert"
    base_model_prefix = "albert"
    residual = "post"
    can_untie = True
    block_writer_specs = (Writer("attention", "attention.dense", bias=True), Writer("mlp", "ffn_output", bias=True))
    # the embeddings live in embedding_size; this projection writes them into the residual stream
    embedding_writer_specs = (Writer("embedding", "encoder.embedding_hidden_mapping_in", bias=True),)

    @property
    def hidden_states_per_layer(self) -> bool:
        # output_hidden_states gives one state per group call, not per layer, when a group has
        # several layers.
        return int(getattr(self.config, "inner_group_num", 1)) == 1

    def slots(self) -> list[str]:
        c = self.config
        return [
            f"encoder.albert_layer_groups.{g}.albert_layers.{j}.attention"
            for g in range(c.num_hidden_groups) for j in range(c.inner_group_num)
        ]

    def layer_sequence(self) -> list[int]:
        # Same arithmetic as AlbertTransformer.forward: layer i runs group int(i / (L / G)), and
        # each group runs its inner_group_num layers in order.
        c = self.config
        L, G, inner = c.num_hidden_layers, c.num_hidden_groups, c.inner_group_num
        return [int(i / (L / G)) * inner + j for i in range(L) for j in range(inner)]

    def _names(self, slot: int) -> tuple[str, str, str, str]:
        p = self.slots()[slot]
        return f"{p}.query", f"{p}.key", f"{p}.value", f"{p}.dense"

    def embed(self, base: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        # ALBERT's embeddings live in embedding_size; the encoder projects them once to hidden_size.
        return base.encoder.embedding_hidden_mapping_in(base.embeddings(input_ids=input_ids))

    def blocks(self, base: torch.nn.Module) -> list[torch.nn.Module]:
        inner = self.config.inner_group_num
        groups = base.encoder.albert_layer_groups
        return [groups[s // inner].albert_layers[s % inner] for s in self.layer_sequence()]
