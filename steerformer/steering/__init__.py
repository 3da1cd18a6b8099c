"""Rank-1 steering of an attention layer (MATH.md §5): edit, choose the strength, verify, save,
publish, undo."""

from .edit import is_steered, steer, steering_records, unsteer
from .record import SteeringRecord

__all__ = ["SteeringRecord", "is_steered", "steer", "steering_records", "unsteer"]
