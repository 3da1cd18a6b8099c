"""One batch of prompts as model inputs — shared by steering, the full-model statistics and collapse.

:meth:`PromptBatch.from_texts` tokenizes without touching the tokenizer: a tokenizer without a pad
token (GPT-2) is padded with its end-of-text id here, instead of setting ``tokenizer.pad_token`` on
the caller's object. Padded positions are masked out, so the pad id never matters.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch


@dataclasses.dataclass
class PromptBatch:
    """Model inputs for a set of prompts and which positions are real tokens."""

    input_ids: torch.Tensor  # (P, n)
    attention_mask: torch.Tensor  # (P, n) 1 = real token
    texts: list[str] | None = None

    def inputs(self) -> dict[str, torch.Tensor]:
        """The keyword arguments of the model's forward."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}

    def to(self, device: torch.device | str | None) -> "PromptBatch":
        """The batch on ``device`` (None: as it is)."""
        if device is None:
            return self
        return PromptBatch(self.input_ids.to(device), self.attention_mask.to(device), self.texts)

    def rows(self) -> list[list[int]]:
        """The real (unpadded) token ids of each prompt."""
        return [ids[mask.bool()].tolist() for ids, mask in zip(self.input_ids.cpu(), self.attention_mask.cpu())]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], *, pad_id: int = 0, left: bool = False,
                  texts: list[str] | None = None) -> "PromptBatch":
        """Token id lists of any lengths, padded with ``pad_id`` (on the right unless ``left``)."""
        n = max(len(r) for r in rows)
        ids = torch.full((len(rows), n), int(pad_id), dtype=torch.long)
        mask = torch.zeros((len(rows), n), dtype=torch.long)
        for i, r in enumerate(rows):
            sl = slice(n - len(r), n) if left else slice(0, len(r))
            ids[i, sl] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, sl] = 1
        return cls(ids, mask, texts)

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: Any) -> "PromptBatch":
        """``texts`` through ``tokenizer`` (special tokens added as the tokenizer does), padded on
        the tokenizer's ``padding_side`` with its pad id, else its end-of-text id, else 0. The
        tokenizer object is left unchanged."""
        texts = [str(t) for t in texts]
        rows = [list(r) for r in tokenizer(texts)["input_ids"]]
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        left = getattr(tokenizer, "padding_side", "right") == "left"
        return cls.from_rows(rows, pad_id=0 if pad is None else pad, left=left, texts=texts)
