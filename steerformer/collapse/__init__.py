"""Looped-model collapse (consensus paper §5.2, docs/math.md §6): loop a model many times over the same
prompts and watch its tokens reach consensus."""

from __future__ import annotations

from .decode import DecodeResult, decode_loop_counts, greedy_decode, load_causal_lm
from .loop import LoopedModel
from .metrics import consensus_stats
from .plots import collapse_figure, figure_path
from .prompts import random_prompt_ids
from .result import CollapseResult
from ..loading import load_tokenizer
from .run import NonFiniteStateError, collapse
from .store import save_into_run
from .weights import pass_seed, reinitialize

__all__ = [
    "CollapseResult", "DecodeResult", "LoopedModel", "NonFiniteStateError", "collapse", "collapse_figure",
    "consensus_stats", "decode_loop_counts", "figure_path", "greedy_decode", "load_causal_lm", "load_tokenizer",
    "pass_seed", "random_prompt_ids", "reinitialize", "save_into_run",
]
