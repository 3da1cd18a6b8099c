"""Power-method statistics (docs/math.md §3–4): per-layer alignment of tokens with the principal
eigenvector of each layer matrix, baselines, cumulative products, and the full-model variant."""

from __future__ import annotations

from .alignment import alignment_stats, intertoken_distance, layer_statistics
from ..configs import StatsConfig
from .cumulative import cumulative_principal, principal_eigvec
from .eigenbasis import Directions, eigen_directions, principal_subspace
from .full_model import DEFAULT_PROMPTS, HiddenStates, model_hidden_states, read_prompts_file
from .result import COLUMNS, AlignmentStats
from .run import PowerMethodReport, power_method_stats

__all__ = [
    "COLUMNS", "DEFAULT_PROMPTS", "AlignmentStats", "Directions", "HiddenStates", "PowerMethodReport", "StatsConfig",
    "alignment_stats", "cumulative_principal", "eigen_directions", "intertoken_distance", "layer_statistics",
    "model_hidden_states", "power_method_stats", "principal_eigvec", "principal_subspace", "read_prompts_file",
]
