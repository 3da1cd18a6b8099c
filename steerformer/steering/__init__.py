"""Rank-1 steering of an attention layer (docs/math.md §5) and ablation of every residual-stream writer
(§5e): edit, choose the strength, verify, save, publish, undo; directions as shareable artefacts.

Modules, each one noun (lower ones never import higher ones):

    common      what they all share: file names and formats, hashes, device, progress, safetensors I/O
    algebra     the pure math: a = wᵀV⁺, ΔW_O = γ u a, the top of the spectrum, the gain search
    edit        ``Edit``, one low-rank edit of one writer's weight (and bias), applied and removed bit for bit
    measure     prompts, probes (dynamics, real model), price (KL), FFN compensation, ``HeldOut``
    record      ``SteeringRecord`` and ``build_record``, the one place a record is filled
    chain       ``Steering``: the ordered records of a model, push/pop/undo/replay, ALBERT untie
    export      the sentence-transformers stack, the model card
    lora        the PEFT LoRA adapter (exact or truncated), vLLM's route, the rank under a cost budget
    upload      the Hub upload every published artefact shares (timeouts, one-line failures)
    direction   ``Direction``: directions per layer as a shareable artefact (folder, Hub, control vector)
    directions  where u comes from: array, .npy, Direction, token, eigenvector, text, contrastive prompts
    checkpoint  save, load (re-attaching the chain), unsteer a checkpoint, steer one on disk (lazy)
    verify      ``verify_checkpoint``
    ablation    ``ablate``: directional ablation of every residual-stream writer
    activation  activation addition: ``activation_steering`` (a run-time hook) and its weight-space equal
    calibrate   the KL budget of a generative model's edit: probe continuations, directions per layer, gain, scan
    evaluate    held-out answers judged (concept rate, KL, distinct-2, fluency): ``evaluate_steering``
    steer       ``steer``: plan → apply → measure → record; ``steered``
    hub         ``push_to_hub``
"""

from .chain import Steering, is_steered, steering_of, steering_records, unsteer
from .checkpoint import (
    load_for_steering, load_model, read_steering, save_steered, steer_checkpoint, unsteer_checkpoint,
)
from .sources import ContrastiveDirection, contrastive_direction, contrastive_directions
from .edit import Edit
from .hub import HubError, push_to_hub
from .lora import choose_lora_rank
from .record import SteeringRecord
from .ablation import ablate
from .direction import Direction
from .steer import steer, steered
from .activation import activation_steering, addition_as_weights, edits_applied
from .evaluate import HELDOUT_QUESTIONS, Baseline, SteeringEvaluation, evaluate_record, evaluate_steering
from .calibrate import addition_vectors
from .verify import verify_checkpoint

__all__ = [
    "Baseline", "ContrastiveDirection", "HELDOUT_QUESTIONS", "addition_vectors", "Direction", "SteeringEvaluation", "activation_steering", "addition_as_weights",
    "edits_applied", "evaluate_record", "evaluate_steering", "Edit", "HubError", "Steering", "SteeringRecord", "ablate", "contrastive_direction",
    "choose_lora_rank", "contrastive_directions", "is_steered", "load_for_steering", "load_model", "push_to_hub", "read_steering", "save_steered", "steer",
    "steer_checkpoint", "steered", "steering_of", "steering_records", "unsteer", "unsteer_checkpoint",
    "verify_checkpoint",
]
