"""Reference and held-out prompts for choosing and pricing an edit, and the tokenizer lookup.

With a tokenizer: short natural sentences (fixed lists, disjoint). Without one (tiny random models
built from configs): seeded random token ids, a different seed for the held-out set.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from ..errors import bad_argument
from ..prompts import PromptBatch

log = logging.getLogger(__name__)

REFERENCE_SENTENCES = (
    "The cat sat quietly on the warm windowsill.",
    "Interest rates rose again after the central bank meeting.",
    "She played the violin at the concert last night.",
    "The new vaccine was tested on thousands of volunteers.",
    "Our team won the football match in the final minute.",
    "He cooked pasta with tomatoes, garlic and fresh basil.",
    "The spacecraft entered orbit around the red planet.",
    "Heavy rain flooded several streets in the old town.",
    "The novel tells the story of a family across three generations.",
    "Engineers repaired the bridge before the winter storms.",
    "The museum opened a new exhibition of modern sculpture.",
    "Students prepared for their mathematics exam all week.",
    "The old lighthouse still guides ships along the rocky coast.",
    "Prices at the grocery store went up by ten percent this year.",
    "A young chess player defeated the world champion in Oslo.",
    "The hospital hired twenty new nurses for the night shift.",
    "Volcanic ash closed the airport for three days.",
    "My grandmother grows roses and tomatoes in her garden.",
    "The orchestra rehearsed the symphony before the premiere.",
    "Scientists discovered a new species of frog in the rainforest.",
    "The city council voted to build a new public library.",
    "He forgot his umbrella and walked home in the rain.",
    "The startup released an app that translates sign language.",
    "Wolves returned to the valley after a century of absence.",
)

HELDOUT_SENTENCES = (
    "A small boat drifted slowly across the calm lake.",
    "The company announced record profits for the quarter.",
    "Children built a snowman in the park this morning.",
    "The doctor recommended more sleep and less coffee.",
    "A famous painter donated his works to the city.",
    "The train to the coast was delayed by an hour.",
    "Farmers expect a good harvest after the sunny summer.",
    "The software update fixed several security problems.",
)


def model_device(model: Any) -> torch.device | None:
    """Where the model's inputs go: the device of its first materialized parameter (None: CPU)."""
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return None


def encode(model: Any, prompts: Sequence[str] | torch.Tensor | None, tokenizer: Any, *, held_out: bool = False,
           n_random: int = 8, n_tokens: int = 12, name: str = "prompts") -> PromptBatch:
    """Prompts as model inputs, on the model's device: strings through the tokenizer, a (P, n) id
    tensor as is, or the defaults (sentences with a tokenizer, seeded random ids without)."""
    return _encode(model, prompts, tokenizer, held_out=held_out, n_random=n_random, n_tokens=n_tokens,
                   name=name).to(model_device(model))


def _encode(model: Any, prompts: Sequence[str] | torch.Tensor | None, tokenizer: Any, *, held_out: bool,
            n_random: int, n_tokens: int, name: str) -> PromptBatch:
    if isinstance(prompts, torch.Tensor):
        if prompts.ndim != 2 or prompts.dtype not in (torch.int64, torch.int32):
            raise bad_argument(name, f"tensor {tuple(prompts.shape)} {prompts.dtype}", "a (prompts, tokens) integer tensor of token ids")
        vocab = int(model.config.vocab_size)
        if prompts.numel() == 0 or int(prompts.min()) < 0 or int(prompts.max()) >= vocab:
            shown = "empty" if prompts.numel() == 0 else f"ids in [{int(prompts.min())}, {int(prompts.max())}]"
            raise bad_argument(name, f"tensor {tuple(prompts.shape)} with {shown}",
                               f"a non-empty tensor of token ids in [0, {vocab - 1}] (vocab_size={vocab})")
        return PromptBatch(prompts.long(), torch.ones_like(prompts, dtype=torch.long))
    if prompts is None and tokenizer is None:
        vocab = int(model.config.vocab_size)
        g = torch.Generator().manual_seed(1 if held_out else 0)
        ids = torch.randint(min(5, vocab - 1), vocab, (n_random, n_tokens), generator=g)
        return PromptBatch(ids, torch.ones_like(ids))
    if prompts is None:
        prompts = HELDOUT_SENTENCES if held_out else REFERENCE_SENTENCES
    if tokenizer is None:
        raise bad_argument(name, list(prompts)[:2], "token ids (a tensor) when no tokenizer is known",
                           "Pass tokenizer=... or a (prompts, tokens) id tensor.")
    prompts = [str(p) for p in prompts]
    if not prompts:
        raise bad_argument(name, prompts, "at least one prompt")
    return PromptBatch.from_texts(prompts, tokenizer)  # never sets tokenizer.pad_token
