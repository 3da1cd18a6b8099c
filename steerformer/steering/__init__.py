"""Steering by weight edits (docs/math.md §5): the steering methods, registered by name (the papers'
rank-1 edit of an attention layer, activation addition written as weights within a KL budget,
ablation of every residual-stream writer, ...), one lifecycle that runs them; verify, save, export,
publish, undo; directions as shareable artefacts.

Modules, each one noun, lower ones never importing higher ones: the map of what each owns is
docs/architecture.md, "steering/ by responsibility" (a test keeps it to the modules that exist).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# public name -> submodule that defines it; imported on first use (steerformer/_lazy.py), so that
# ``sf.steer`` on a causal LM imports no hub, upload, export, LoRA or verify code (tests/test_lazy_imports.py)
_EXPORTS: dict[str, str] = {
    "Steering": ".chain", "is_steered": ".chain", "steering_of": ".chain", "steering_records": ".chain",
    "unsteer": ".chain",
    "load_for_steering": ".checkpoint", "load_model": ".checkpoint", "read_chain": ".checkpoint",
    "save_steered": ".checkpoint", "read_records": ".checkpoint", "steer_checkpoint": ".checkpoint", "unsteer_checkpoint": ".checkpoint",
    "ContrastiveDirection": ".sources", "contrastive_direction": ".sources",
    "contrastive_directions": ".sources", "read_npy": ".sources", "head_kind": ".measure",
    "Edit": ".edit",
    "HubError": ".hub", "push_to_hub": ".hub",
    "choose_lora_rank": ".lora",
    "SteeringRecord": ".record",
    "Direction": ".direction",
    "ablate": ".methods.ablation.method", "steer": ".steer", "steered": ".steer",
    "Method": ".methods", "get_method": ".methods", "register_method": ".methods",
    "built_in_configs": ".methods", "choose_method": ".methods", "config_of": ".methods",
    "activation_steering": ".activation", "addition_as_weights": ".methods.addition.weights",
    "edits_applied": ".activation",
    "HELDOUT_QUESTIONS": ".evaluation.evaluate", "Baseline": ".evaluation.evaluate", "SteeringEvaluation": ".evaluation.evaluate",
    "evaluate_record": ".evaluation.evaluate", "evaluate_steering": ".evaluation.evaluate", "check_generates": ".evaluation.evaluate",
    "DOSE_SCALES": ".evaluation.evaluate",
    "addition_vectors": ".methods.addition.calibrate",
    "ChatJudge": ".evaluation.judge", "JudgeError": ".evaluation.judge", "JudgeItem": ".evaluation.judge", "OfflineJudge": ".evaluation.judge",
    "Rating": ".evaluation.judge", "judge_answers": ".evaluation.judge", "make_judge": ".evaluation.judge",
    "kl_curve": ".methods.addition.method",
    "verify_checkpoint": ".verify",
    "ExportFormat": ".exports", "export_steered": ".exports", "format_names": ".exports", "get_format": ".exports",
    "register_format": ".exports",
    "steer_and_hooks": ".comparison", "record_section": ".export",
    "Conversation": ".conversation", "StrengthDial": ".conversation", "check_strength": ".conversation",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, public=__all__)


if TYPE_CHECKING:  # static analysers and IDEs see the eager imports
    from .chain import Steering, is_steered, steering_of, steering_records, unsteer
    from .checkpoint import (
        load_for_steering, load_model, read_chain, read_records, save_steered, steer_checkpoint, unsteer_checkpoint,
    )
    from .sources import ContrastiveDirection, contrastive_direction, contrastive_directions, read_npy
    from .measure import head_kind
    from .edit import Edit
    from .hub import HubError, push_to_hub
    from .lora import choose_lora_rank
    from .record import SteeringRecord
    from .direction import Direction
    from .methods.ablation.method import ablate
    from .steer import steer, steered
    from .methods import Method, built_in_configs, choose_method, config_of, get_method, register_method
    from .activation import activation_steering, edits_applied
    from .methods.addition.weights import addition_as_weights
    from .evaluation.judge import ChatJudge, JudgeError, JudgeItem, OfflineJudge, Rating, judge_answers, make_judge
    from .methods.addition.method import kl_curve
    from .evaluation.evaluate import check_generates, DOSE_SCALES, HELDOUT_QUESTIONS, Baseline, SteeringEvaluation, evaluate_record, evaluate_steering
    from .methods.addition.calibrate import addition_vectors
    from .verify import verify_checkpoint
    from .exports import ExportFormat, export_steered, format_names, get_format, register_format
    from .comparison import steer_and_hooks
    from .conversation import Conversation, StrengthDial, check_strength
    from .export import record_section
