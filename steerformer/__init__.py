"""steerformer: see, measure and steer how tokens move through a transformer's layers.

The public API is re-exported here; everything else is private. The exports are lazy: ``import
steerformer`` loads nothing heavy (no torch, transformers, matplotlib or scipy) until a name is
first used, so that ``steerformer --help`` starts fast. ``steerformer.X`` and
``from steerformer import X`` work as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from .version import __version__

# public name -> submodule that defines it (relative to this package)
_EXPORTS: dict[str, str] = {
    # adapters
    "ADAPTERS": ".adapters", "Adapter": ".adapters", "AttentionWeights": ".adapters", "MaskSpec": ".adapters",
    "get_adapter": ".adapters",
    # analysis
    "AnalysisReport": ".analyze", "analyze": ".analyze",
    "attention_output": ".attention", "attention_probs": ".attention",
    # collapse
    "CollapseResult": ".collapse", "DecodeResult": ".collapse", "collapse": ".collapse",
    "collapse_figure": ".collapse", "greedy_decode": ".collapse",
    # dynamics
    "Trajectory": ".dynamics", "dynamics_step": ".dynamics", "random_tokens": ".dynamics",
    "run_dynamics": ".dynamics",
    # errors
    "CheckpointError": ".errors", "InvalidArgumentError": ".errors", "ModelNotFoundError": ".errors",
    "NonFiniteStateError": ".errors", "SteerformerError": ".errors", "UnsupportedModelError": ".errors",
    # loading, matrices, spectra
    "BUNDLED_MINILM": ".loading", "BUNDLED_SMOLLM2": ".gguf_source", "ModelSource": ".loading", "open_source": ".loading",
    "load_tokenizer": ".loading",
    "LayerMatrices": ".matrices", "layer_matrices": ".matrices", "read_attention_weights": ".matrices",
    "Spectra": ".spectra", "spectra": ".spectra",
    # ODE module
    "SETUPS": ".ode", "SetupResult": ".ode", "run_setup": ".ode", "wendel_probability": ".ode",
    # steering
    "SteeringRecord": ".steering", "is_steered": ".steering", "load_for_steering": ".steering",
    "push_to_hub": ".steering", "save_steered": ".steering", "steer": ".steering",
    "steering_records": ".steering", "unsteer": ".steering", "unsteer_checkpoint": ".steering",
    "verify_checkpoint": ".steering",
    # loading that re-attaches a steered checkpoint's chain (the source layer loads weights only)
    "load_model": ".steering",
    # steering edits as values (issue 11): the Edit / Steering API and the context manager
    "Edit": ".steering", "Steering": ".steering", "steered": ".steering", "steering_of": ".steering",
    "ContrastiveDirection": ".steering", "contrastive_direction": ".steering",
    # ablation of every residual-stream writer, directions as shareable artefacts (issue 20)
    "ablate": ".steering", "Direction": ".steering",
    # steering a chat model (issue 17): activation addition at run time and as weights, the evaluation
    "activation_steering": ".steering", "addition_as_weights": ".steering", "evaluate_steering": ".steering",
    "SteeringEvaluation": ".steering", "Baseline": ".steering",
    # the result protocol
    "ResultProtocol": ".results",
    # options as configs, prompts as model inputs (issue 12)
    "CollapseConfig": ".configs", "SteerConfig": ".configs", "PromptBatch": ".prompts", "as_source": ".loading",
    # statistics
    "AlignmentStats": ".stats", "HiddenStates": ".stats", "PowerMethodReport": ".stats", "StatsConfig": ".stats",
    "alignment_stats": ".stats", "model_hidden_states": ".stats", "power_method_stats": ".stats",
}

# subpackages reachable as attributes (``steerformer.ode``, ``steerformer.formats``)
_SUBMODULES = ("adapters", "collapse", "formats", "ode", "results", "stats", "steering", "sweep")

__all__ = sorted([*_EXPORTS, "__version__", "ode"])

# ``__getattr__`` imports the submodule that defines a name on first use (PEP 562); a function named
# like its submodule (``steerformer.analyze``) stays the function (steerformer/_lazy.py).
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES, __all__)


if TYPE_CHECKING:  # static analysers and IDEs see the eager imports
    from . import formats, ode, sweep
    from .adapters import ADAPTERS, Adapter, AttentionWeights, MaskSpec, get_adapter
    from .analyze import AnalysisReport, analyze
    from .attention import attention_output, attention_probs
    from .collapse import CollapseResult, DecodeResult, collapse, collapse_figure, greedy_decode
    from .dynamics import Trajectory, dynamics_step, random_tokens, run_dynamics
    from .errors import (
        CheckpointError, InvalidArgumentError, ModelNotFoundError, NonFiniteStateError, SteerformerError,
        UnsupportedModelError,
    )
    from .gguf_source import BUNDLED_SMOLLM2
    from .loading import BUNDLED_MINILM, ModelSource, load_tokenizer, open_source
    from .matrices import LayerMatrices, layer_matrices, read_attention_weights
    from .ode import SETUPS, SetupResult, run_setup, wendel_probability
    from .configs import CollapseConfig, SteerConfig
    from .loading import as_source
    from .prompts import PromptBatch
    from .results import ResultProtocol
    from .spectra import Spectra, spectra
    from .steering import (
        Baseline, ContrastiveDirection, Direction, Edit, Steering, SteeringEvaluation, SteeringRecord, ablate,
        activation_steering, addition_as_weights, contrastive_direction, evaluate_steering, is_steered,
        load_for_steering, load_model, push_to_hub, save_steered, steer, steered,
        steering_of, steering_records, unsteer, unsteer_checkpoint, verify_checkpoint,
    )
    from .stats import (
        AlignmentStats, HiddenStates, PowerMethodReport, StatsConfig, alignment_stats, model_hidden_states,
        power_method_stats,
    )
