"""Power-method statistics (MATH.md §3–4): per-layer alignment of tokens with the principal
eigenvector of each layer matrix, baselines, cumulative products, and the full-model variant."""

from __future__ import annotations

from .alignment import alignment_stats, intertoken_distance, layer_statistics
from .cumulative import cumulative_principal, principal_eigvec
from .directions import Directions, eigen_directions, principal_subspace
from .result import COLUMNS, AlignmentStats

__all__ = [
    "COLUMNS", "AlignmentStats", "Directions", "alignment_stats", "cumulative_principal", "eigen_directions",
    "intertoken_distance", "layer_statistics", "principal_eigvec", "principal_subspace",
]
