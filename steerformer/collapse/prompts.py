"""The prompts the looped model runs on: the paper's random ones, or the user's ids or texts."""

from __future__ import annotations

import logging
import random
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidArgumentError, bad_argument
from ..prompts import PromptBatch

log = logging.getLogger(__name__)


def random_prompt_ids(prompts: int, length: int, vocab_size: int, *, seed: int = 42) -> np.ndarray:
    """``prompts × length`` ids uniform over ``[0, vocab_size)``, drawn exactly as the reference
    code does (Python ``random`` seeded with ``seed``, ``randint`` row by row)."""
    rng = random.Random(seed)
    return np.array([[rng.randint(0, vocab_size - 1) for _ in range(length)] for _ in range(prompts)],
                    dtype=np.int64)


def check_token_ids(token_ids: Any, *, vocab_size: int, max_positions: int | None,
                    name: str = "token_ids") -> np.ndarray:
    """User-given ids as an int64 array (prompts, length), checked against the model."""
    try:
        ids = np.asarray(token_ids.detach().cpu() if hasattr(token_ids, "detach") else token_ids)
    except (TypeError, ValueError):
        raise bad_argument(name, type(token_ids).__name__, "an integer array of shape (prompts, length)") from None
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise bad_argument(name, f"array of shape {ids.shape} and dtype {ids.dtype}",
                           "a non-empty integer array of shape (prompts, length)")
    check_length(ids.shape[1], max_positions, name=f"{name} length")
    bad = (ids < 0) | (ids >= vocab_size)
    if bad.any():
        p, t = (int(i) for i in np.argwhere(bad)[0])
        raise bad_argument(name, f"id {int(ids[p, t])} at prompt {p}, position {t}",
                           f"ids in [0, {vocab_size}) — the model's vocabulary has {vocab_size} entries")
    return ids.astype(np.int64)


def check_length(length: int, max_positions: int | None, *, name: str = "length") -> None:
    if not (isinstance(length, (int, np.integer)) and length >= 2):
        raise bad_argument(name, length, "an integer >= 2 (E compares every token with the first one)")
    if max_positions is not None and length > max_positions:
        raise bad_argument(name, int(length), f"at most {max_positions}, the number of positions the model embeds",
                           f"Use --length {max_positions} or less.")


def tokenize_texts(texts: Sequence[str], tokenizer: Any, *, max_positions: int | None) -> np.ndarray:
    """Token ids of ``texts``, all cut to the shortest one's length (E's band over prompts needs a
    common length; padding tokens would join the consensus)."""
    if isinstance(texts, str):
        texts = [texts]
    if tokenizer is None:
        raise InvalidArgumentError("texts=... needs a tokenizer: pass tokenizer=, or a checkpoint directory "
                                   "or Hub id whose tokenizer files can be read offline.")
    rows = PromptBatch.from_texts(texts, tokenizer).rows()
    n = min(len(r) for r in rows)
    if max_positions is not None:
        n = min(n, max_positions)
    if any(len(r) != n for r in rows):
        log.warning("texts tokenize to %s tokens: every prompt is cut to %d", sorted({len(r) for r in rows}), n)
    check_length(n, max_positions, name="texts (tokenized length)")
    return np.array([r[:n] for r in rows], dtype=np.int64)
