"""steerformer: see, measure and steer how tokens move through a transformer's layers.

The public API is re-exported here; everything else is private.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .adapters import ADAPTERS, Adapter, AttentionWeights, MaskSpec, get_adapter
from .analyze import AnalysisReport, analyze
from .attention import attention_output, attention_probs
from .collapse import CollapseResult, DecodeResult, collapse, collapse_figure, greedy_decode
from .dynamics import Trajectory, dynamics_step, random_tokens, run_dynamics
from .errors import (
    CheckpointError, InvalidArgumentError, ModelNotFoundError, NonFiniteStateError, SteerformerError,
    UnsupportedModelError,
)
from .loading import BUNDLED_MINILM, ModelSource, load_model, open_source
from .matrices import LayerMatrices, layer_matrices, read_attention_weights
from . import ode
from .ode import SETUPS, SetupResult, run_setup, wendel_probability
from .spectra import Spectra, spectra
from .steering import (
    ContrastiveDirection, contrastive_direction,
    SteeringRecord, is_steered, load_for_steering, push_to_hub, save_steered, steer, steering_records, unsteer,
    unsteer_checkpoint, verify_checkpoint,
)
from .stats import (
    AlignmentStats, HiddenStates, PowerMethodReport, StatsConfig, alignment_stats, model_hidden_states, power_method_stats,
)

__all__ = [
    "ADAPTERS", "Adapter", "AnalysisReport", "CollapseResult", "DecodeResult", "analyze", "collapse",
    "collapse_figure", "greedy_decode", "AttentionWeights", "BUNDLED_MINILM", "CheckpointError", "InvalidArgumentError",
    "LayerMatrices", "MaskSpec", "ModelNotFoundError", "ModelSource", "Spectra", "SteerformerError",
    "Trajectory", "UnsupportedModelError", "__version__", "attention_output", "attention_probs",
    "dynamics_step", "get_adapter", "layer_matrices", "load_model", "open_source", "random_tokens",
    "read_attention_weights", "run_dynamics", "spectra",
    "AlignmentStats", "HiddenStates", "PowerMethodReport", "StatsConfig", "alignment_stats", "model_hidden_states",
    "power_method_stats", "SteeringRecord", "is_steered", "load_for_steering", "push_to_hub", "save_steered",
    "steer", "steering_records", "unsteer", "unsteer_checkpoint", "verify_checkpoint", "NonFiniteStateError", "SETUPS", "SetupResult", "ode", "run_setup", "wendel_probability",
    "ContrastiveDirection", "contrastive_direction",
]

# Steering edits as values (issue 11): the Edit / Steering API and the context manager.
from .steering import Edit, Steering, steered, steering_of  # noqa: E402

__all__ += ["Edit", "Steering", "steered", "steering_of"]
