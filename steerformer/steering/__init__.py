"""Rank-1 steering of an attention layer (MATH.md §5): edit, choose the strength, verify, save,
publish, undo.

Modules, each one noun (lower ones never import higher ones):

    common      what they all share: file names and formats, hashes, device, progress, safetensors I/O
    algebra     the pure math: a = wᵀV⁺, ΔW_O = γ u a, the top of the spectrum, the gain search
    edit        ``Edit``, one rank-1 edit of one stored weight, applied and removed bit for bit
    measure     prompts, probes (dynamics, real model), price (KL), FFN compensation, ``HeldOut``
    directions  where u comes from: array, .npy, token, eigenvector, text, contrastive prompts
    record      ``SteeringRecord`` and ``build_record``, the one place a record is filled
    chain       ``Steering``: the ordered records of a model, push/pop/undo/replay, ALBERT untie
    export      PEFT LoRA adapter, the sentence-transformers stack, the model card
    checkpoint  save, load (re-attaching the chain), unsteer a checkpoint, steer one on disk (lazy)
    verify      ``verify_checkpoint``
    steer       ``steer`` and ``ablate``: plan → apply → measure → record; ``steered``
    hub         ``push_to_hub``
"""

from .chain import Steering, is_steered, steering_of, steering_records, unsteer
from .checkpoint import (
    load_for_steering, load_model, read_steering, save_steered, steer_checkpoint, unsteer_checkpoint,
)
from .directions import ContrastiveDirection, contrastive_direction
from .edit import Edit
from .hub import HubError, push_to_hub
from .record import SteeringRecord
from .steer import ablate, steer, steered
from .verify import verify_checkpoint

__all__ = [
    "ContrastiveDirection", "Edit", "HubError", "Steering", "SteeringRecord", "ablate", "contrastive_direction",
    "is_steered", "load_for_steering", "load_model", "push_to_hub", "read_steering", "save_steered", "steer",
    "steer_checkpoint", "steered", "steering_of", "steering_records", "unsteer", "unsteer_checkpoint",
    "verify_checkpoint",
]
