"""Spectra (and optionally the power-method statistics) over many checkpoints: one task per
(checkpoint, distinct layer), run locally or on Ray, resumable (issue 14 item 4; docs/scale.md)."""

from .run import Checkpoint, SweepResult, checkpoints_from, sweep

__all__ = ["Checkpoint", "SweepResult", "checkpoints_from", "sweep"]
