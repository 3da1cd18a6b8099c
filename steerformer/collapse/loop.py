"""The looped model: embed once, then passes of every block followed by the final norm.

Family knowledge (how to embed, which blocks in which order, how to call one with its mask, the
final norm, what "without FFN" means) comes from the adapter; this file only sequences it.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..adapters import get_adapter


class LoopedModel:
    """Runs ``model`` (a transformers model in eval mode) as a model of unbounded depth."""

    def __init__(self, model: torch.nn.Module, *, ffn: bool = True) -> None:
        self.model = model
        self.base = model.base_model
        self.adapter = get_adapter(model.config)
        self.ffn = ffn
        self.blocks = self.adapter.blocks(self.base)
        self.norm = self.adapter.final_norm(self.base)
        self._masks: dict[tuple, list[torch.Tensor | None]] = {}

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def masks(self, n: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor | None]:
        """What each block needs besides its hidden states for ``n`` tokens (its additive mask, or
        the keyword arguments the model passes it: rotary cos/sin, per-layer masks), built once."""
        key = (n, dtype, str(device))
        if key not in self._masks:
            # one length at a time: keep memory flat
            self._masks = {key: self.adapter.block_inputs(self.base, n, dtype, device)}
        return self._masks[key]

    @torch.no_grad()
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.adapter.embed(self.base, input_ids)

    @torch.no_grad()
    def run_pass(self, h: torch.Tensor, on_block: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
        """One pass: every block in execution order with its own mask, ``on_block(k, states)``
        after block k (states before the final norm), then the final norm if the model has one."""
        masks = self.masks(h.shape[-2], h.dtype, h.device)
        for k, block in enumerate(self.blocks):
            h = self.adapter.run_block(block, h, masks[k], ffn=self.ffn)
            if on_block is not None:
                on_block(k, h)
        return h if self.norm is None else self.norm(h)
