"""Rank-1 steering of an attention layer (MATH.md §5): edit, choose the strength, verify, save,
publish, undo."""

from .contrastive import ContrastiveDirection, contrastive_direction
from .edit import is_steered, steer, steered, steering_records, unsteer
from .edits import Edit, Steering, steering_of
from .hub import push_to_hub
from .record import SteeringRecord
from .save import (
    load_for_steering,
    read_steering,
    save_steered,
    unsteer_checkpoint,
    verify_checkpoint,
)

__all__ = [
    "ContrastiveDirection", "contrastive_direction",
    "Edit", "Steering", "steering_of", "SteeringRecord", "is_steered", "load_for_steering", "push_to_hub", "read_steering", "save_steered", "steer",
    "steered", "steering_records", "unsteer", "unsteer_checkpoint", "verify_checkpoint",
]
