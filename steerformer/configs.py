"""Options as configs (PEFT's config classes are the model): one dataclass per feature whose fields
carry their help text and command-line flag, checked in ``__post_init__``. The CLI builds its
typer options from these fields (``steerformer_cli._common.config_options``), results store them,
and a resumed collapse run compares them.

This module is import-light (no torch, no numpy): the CLI reads it to build ``--help``.

One seed default: every random draw in steerformer defaults to ``seed=0`` (:data:`SEED`), except
``collapse``, whose ``seed=42`` is the consensus paper's reference code (its random prompts and
weights are drawn exactly as that code draws them; changing it would change every published curve).
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from .errors import bad_argument

if TYPE_CHECKING:  # torch is imported where a dtype or device is read: `steerformer --help` stays fast
    import torch

#: The seed of every random draw unless a function says otherwise (collapse: 42, the paper's).
SEED = 0

#: The one dtype table: every precision name steerformer accepts → the torch dtype it means (by
#: its attribute name: this module imports no torch). :func:`torch_dtype` reads it.
DTYPES = {
    "fp16": "float16", "float16": "float16", "half": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp32": "float32", "float32": "float32", "float": "float32",
    "fp64": "float64", "float64": "float64", "double": "float64",
}

#: Run precisions (``--dtype`` everywhere): the names the CLI offers.
RUN_DTYPES = ("fp32", "fp16", "bf16", "fp64")

#: Eigen-decomposition precisions (``analyze --eig-dtype``).
EIG_DTYPES = ("float64", "float32")

#: Corrections of the beyond-chance test across layers (``--correction``; stats/testing.py says why bh).
CORRECTIONS = ("bh", "holm")


def torch_dtype(value: Any, *, choices: Sequence[str] | None = None, name: str = "dtype") -> Any:
    """The torch dtype ``value`` names: a name of :data:`DTYPES` (or of ``choices`` when given), any
    case, an optional ``torch.`` prefix, or a ``torch.dtype`` itself; ``None`` stays ``None``."""
    import torch

    if value is None or isinstance(value, torch.dtype):
        return value
    key = str(value).lower().removeprefix("torch.")
    allowed = DTYPES if choices is None else choices
    if key not in allowed:
        raise bad_argument(name, value, f"one of {', '.join(sorted(allowed))}"
                           + (" or a torch.dtype" if choices is None else ""))
    return getattr(torch, DTYPES[key])


def check_device(device: Any, *, name: str = "device", kinds: tuple[str, ...] | None = None) -> torch.device:
    """The torch device ``device`` names (cpu for None), checked before anything is loaded: a
    typo, CUDA on a CPU build or an index past the last GPU is one clear error naming ``name``.
    ``kinds``: the device types the caller can run on (the eigen-solvers: cpu and cuda). The one
    device check of the package (``eig.resolve_device`` is this with ``kinds=("cpu", "cuda")``); it lives
    here, with the other option checks, so that the math core (``eig.py``) uses it without importing
    the source layer."""
    import torch

    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise bad_argument(name, device, "a torch device such as cpu, cuda, cuda:1 or mps") from None
    if kinds is not None and dev.type not in kinds:
        raise bad_argument(name, device, " or ".join(repr(k) for k in kinds))
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise bad_argument(name, device, "a device this machine has (this torch build sees no CUDA GPU)",
                               "Use --device cpu.")
        if dev.index is not None and dev.index >= n:
            raise bad_argument(name, device, f"cuda:0 … cuda:{n - 1} ({n} GPU(s) visible)")
        return dev
    if dev.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise bad_argument(name, device, "a device this machine has (MPS is not available)", "Use --device cpu.")
        return dev
    try:
        torch.empty(0, device=dev)
    except Exception:
        raise bad_argument(name, device, "a device this machine has", "Use --device cpu.") from None
    return dev


def select_layers(layers: Sequence[int] | int | None, n_layers: int, *, name: str = "layers") -> list[int]:
    """Normalize a layer selection (negative indices count from the end) and check the range (numpy
    integers count: numpy registers them as ``numbers.Integral``)."""
    if layers is None:
        return list(range(n_layers))
    if isinstance(layers, Integral):
        layers = [int(layers)]
    out = []
    for k in layers:
        if not isinstance(k, Integral) or not -n_layers <= k < n_layers:
            raise bad_argument(name, list(layers), f"layer indices in [-{n_layers}, {n_layers - 1}] "
                               f"(the model has {n_layers} layers)")
        out.append(int(k) % n_layers)
    if not out:
        raise bad_argument(name, list(layers), f"at least one layer index in [-{n_layers}, {n_layers - 1}]",
                           "Leave it out (None) to take every layer.")
    dup = sorted({k for k in out if out.count(k) > 1})
    if dup:  # refused, not de-duplicated: a repeated layer is a typo more often than a wish
        raise bad_argument(name, list(layers), f"each layer once (layer {', '.join(map(str, dup))} is named "
                           "more than once, counting negative indices from the end)")
    return out


def option(default: Any, help: str, *, flag: str | None = None, short: str | None = None,
           cli_type: Any = None, choices: Sequence[str] | None = None, invert: str | None = None,
           cli: bool = True, resume: bool = True) -> Any:
    """A config field with its help text and how the CLI shows it.

    ``flag``: the long flag (default ``--field-name``); ``cli_type``: the Python type typer parses
    (default: the default's type); ``choices``: valid values (an Enum on the CLI, checked before any
    model loads); ``invert``: the field is the negation of this boolean flag (``--no-plots`` sets
    ``plots=False``); ``cli=False``: Python only; ``resume=False``: may change when a run resumes."""
    return dataclasses.field(default=default, metadata={
        "help": help, "flag": flag, "short": short, "cli_type": cli_type, "choices": tuple(choices) if choices else None,
        "invert": invert, "cli": cli, "resume": resume})


class Config:
    """Shared behaviour of the option dataclasses: ``to_dict``, ``from_dict``, ``help_of``, ``differences``."""

    #: Old keyword -> new field name (deprecated aliases, accepted by ``from_dict`` for one release).
    renamed: ClassVar[dict[str, str]] = {}

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (paths as strings, tuples as lists)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Path):
                v = str(v)
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """A config from a dict (e.g. a stored run), ignoring keys that are not fields and reading
        the deprecated names in :attr:`renamed`."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {}
        for k, v in data.items():
            k = cls.renamed.get(k, k)
            if k in names:
                kw[k] = v
        return cls(**kw)

    @classmethod
    def help_of(cls, name: str) -> str:
        """The help text of field ``name``."""
        return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)

    def check_types(self) -> None:
        """Every field declared ``int`` (or ``int | None``) holds a whole number — not a float, a
        string or a bool — and every ``bool`` field a bool: ``layer=0.5`` is one clear error here,
        not a TypeError deep in the code that indexes with it."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            kind = str(f.type).replace(" ", "")
            if kind in ("int", "int|None") and not (v is None and kind != "int" or _is_whole(v)):
                raise bad_argument(f.name, v, "a whole number" + (" or None" if kind != "int" else ""))
            if kind == "bool" and type(v).__name__ not in ("bool", "bool_"):
                raise bad_argument(f.name, v, "True or False")

    def differences(self, other: "Config", *, resume_only: bool = False) -> dict[str, tuple[Any, Any]]:
        """``{field: (self's, other's)}`` for the fields that differ (``resume_only``: only those a
        resumed run must keep)."""
        return {f.name: (getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self)
                if (f.metadata.get("resume", True) or not resume_only) and getattr(self, f.name) != getattr(other, f.name)}


def _positive_int(name: str, v: Any, what: str = "a positive integer", low: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) and not type(v).__name__.startswith("int") or int(v) < low:
        raise bad_argument(name, v, what)


def _is_whole(v: Any) -> bool:
    """An int or a NumPy integer, not a bool."""
    return not isinstance(v, bool) and (isinstance(v, int) or type(v).__name__.startswith(("int", "uint")))


def _finite(v: Any) -> bool:
    if isinstance(v, (str, bytes)):
        return False
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


@dataclasses.dataclass
class StatsConfig(Config):
    """Options of the power-method statistics (docs/math.md §3–4)."""

    n_prompts: int = option(100, "Random prompts of the controlled dynamics.")
    n_tokens: int = option(10, "Tokens per random prompt.")
    tokens: Any = option(None, "User-given initial tokens (prompts, tokens, d) instead of random ones.", cli=False)
    seed: int = option(SEED, "Seed of the random initial tokens.")
    normalize_initial: bool = option(True, "Run the initial tokens as drawn from N(0, I), not normalized "
                                           "(Appendix B's literal reading).", invert="--raw-initial")
    tau: float = option(1.0, "Step size τ of the dynamics x + τ F A x (paper: 1).")
    layer_norm: bool | None = option(None, "Apply the model's own pre-attention norm (LayerNorm or RMSNorm: ln_1, "
                                           "input_layernorm) before attention, or not. Default: both, for pre-LN "
                                           "models.", flag="--layer-norm/--no-layer-norm", cli_type=bool)
    null_draws: int = option(100, "Random-weight draws of the null model (the beyond-chance test); 0 = off.")
    alpha: float = option(0.05, "Level of the beyond-chance test (adjusted p-values of Δρ and P both below it).")
    correction: str = option("bh", "Correction across layers: bh (Benjamini–Hochberg, false discovery rate) | "
                                   "holm (family-wise error).", choices=CORRECTIONS)
    ci: float = option(0.95, "Confidence level of the intervals (percentile bootstrap over prompts); 0 = none.")
    bootstrap: int = option(1000, "Bootstrap resamples of the prompts for the intervals.")
    seeds: int = option(1, "Repeat the controlled dynamics and the test with token seeds seed..seed+K−1 and report "
                           "how often each layer's verdicts hold (a layer beyond chance in fewer than 90 % of them "
                           "is marked unstable).")
    bias: bool = option(False, "Keep the value/output biases in the dynamics.")
    prolong: int | None = option(None, "Prolonged run: apply the layers K times (default 10 for shared-weight "
                                       "models such as ALBERT).", cli_type=int)
    full_model: bool = option(True, "Skip the full-model variant (model's own hidden states).", invert="--no-full-model")
    prompts: Sequence[str] | str | Path | None = option(
        None, "Text file, one prompt per line, for the full-model variant (default: built-in sentences).",
        cli_type=Path)
    cumulative: bool = option(True, "Skip the cumulative-product statistic (Fig. 8).", invert="--no-cumulative")

    def __post_init__(self) -> None:
        self.check_types()
        for name in ("n_prompts", "n_tokens"):
            _positive_int(name, getattr(self, name))
        if self.prolong is not None:
            _positive_int("prolong", self.prolong, "an integer K >= 1 (the prolonged run applies the layers K times)")
        _positive_int("null_draws", self.null_draws, "an integer K >= 0 (0 turns the null model off)", low=0)
        if isinstance(self.alpha, bool) or not _finite(self.alpha) or not 0 < float(self.alpha) < 1:
            raise bad_argument("alpha", self.alpha, "a test level in (0, 1), e.g. 0.05")
        if self.correction not in CORRECTIONS:
            raise bad_argument("correction", self.correction, f"one of {', '.join(CORRECTIONS)}")
        if isinstance(self.ci, bool) or not _finite(self.ci) or not (float(self.ci) == 0 or 0 < float(self.ci) < 1):
            raise bad_argument("ci", self.ci, "a confidence level in (0, 1), e.g. 0.95, or 0 for no intervals")
        _positive_int("bootstrap", self.bootstrap, "a number of resamples >= 100, e.g. 1000", low=100)
        _positive_int("seeds", self.seeds, "an integer K >= 1 (token seeds seed..seed+K-1)")
        if self.layer_norm is not None and type(self.layer_norm).__name__ not in ("bool", "bool_"):
            raise bad_argument("layer_norm", self.layer_norm, "True, False or None (both, for pre-LN models)")
        if not _finite(self.tau):
            raise bad_argument("tau", self.tau, "a finite step size")


WEIGHTS = ("pretrained", "random", "random-per-pass")
E_PRECISIONS = ("float64", "states")


@dataclasses.dataclass
class CollapseConfig(Config):
    """Options of the looped-model collapse experiment (consensus paper §5.2). The default seed 42
    is the reference code's."""

    renamed: ClassVar[dict[str, str]] = {"prompts": "n_prompts"}

    passes: int = option(10, "How many times the whole model is looped.", short="-p", resume=False)
    n_prompts: int = option(100, "Number of random prompts (ids uniform over the vocabulary).")
    length: int = option(200, "Tokens per random prompt.")
    ffn: bool = option(True, "Drop every FFN with its norm and its residual.", invert="--no-ffn")
    weights: str = option("pretrained", "Pretrained weights, one random draw, or a new draw every pass.",
                          choices=WEIGHTS)
    seed: int = option(42, "Seed of the random prompts and of the random weights.")
    dtype: Any = option(None, "Run precision (default: the checkpoint's).", choices=RUN_DTYPES)
    batch_size: int | None = option(None, "Prompts run together (default: all).", cli_type=int)
    early_stop_tol: float | None = option(None, "Stop once E < TOL for a whole pass.", flag="--early-stop",
                                          cli_type=float, resume=False)
    e_precision: str = option("float64", "float64 (accurate E, default) | states (the reference code's 1 - mean "
                                         "cos in the states' dtype, to reproduce the paper's fp16 curves).",
                              cli_type=str)

    def __post_init__(self) -> None:
        self.check_types()
        _positive_int("passes", self.passes, "an integer >= 1 (how many times the model is looped)")
        _positive_int("n_prompts", self.n_prompts, "an integer >= 1 (how many random prompts)")
        if self.weights not in WEIGHTS:
            raise bad_argument("weights", self.weights, f"one of {', '.join(WEIGHTS)}")
        if self.batch_size is not None:
            _positive_int("batch_size", self.batch_size, "an integer >= 1 (prompts run together)")
        if self.early_stop_tol is not None and not (_finite(self.early_stop_tol) and self.early_stop_tol > 0):
            raise bad_argument("early_stop_tol", self.early_stop_tol, "a positive tolerance on E, or None")
        if self.e_precision not in E_PRECISIONS:
            raise bad_argument("e_precision", self.e_precision, f"one of {', '.join(E_PRECISIONS)}")


SOLVES = ("exact", "min-norm")
MEASURES = ("dynamics", "model")
MODES = ("steer", "ablate")
#: the writers ablation may edit (``adapters.base.Writer`` kinds; "embedding" covers every embedding
#: writer: token, learned positions, token type)
ABLATION_WRITERS = ("attention", "mlp", "embedding")
#: norm-preserving ablation (steering.algebra.NORM_PRESERVING; this module imports no torch)
NORM_PRESERVING = ("rows", "columns")


def ablation_writers(value: Any) -> tuple[str, ...]:
    """The writer kinds of ``writers=`` ("attention,mlp" or a sequence), checked, in their order."""
    items = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value or [])
    bad = [p for p in items if p not in ABLATION_WRITERS]
    if not items or bad or len(set(items)) != len(items):
        raise bad_argument("writers", value, f"a comma list of distinct writers from {', '.join(ABLATION_WRITERS)}",
                           "e.g. 'attention,mlp' (what abliteration tools edit) or 'attention,mlp,embedding'.")
    return tuple(k for k in ABLATION_WRITERS if k in items)


def check_ablation_scale(scale: Any) -> None:
    """s in (0, 1], or {layer: s} (an int layer, or "embedding") with each s in (0, 1]."""
    items = scale.items() if isinstance(scale, dict) else [(None, scale)]
    if isinstance(scale, dict) and not scale:
        raise bad_argument("scale", scale, "a number in (0, 1] or a non-empty {layer: s} mapping")
    for layer, s in items:
        if layer is not None and layer != "embedding" and not str(layer).lstrip("-").isdigit():
            raise bad_argument("scale", scale, "{layer: s} with integer layers (and optionally 'embedding')")
        if isinstance(s, bool) or not _finite(s) or not 0 < float(s) <= 1:
            raise bad_argument("scale", s if layer is None else scale,
                               "a number in (0, 1]: 1 removes u entirely, less removes part of it"
                               + ("" if layer is None else f" (layer {layer}: {s!r})"))


#: where the KL-calibrated addition acts: every position, or all but the first (the chat template's first token)
POSITIONS = ("skip-first", "all")
#: the KL budget of the addition method's KL-only choice (``choose="kl"``), nats per token on the probe
#: continuations (docs/steering-chat.md)
DEFAULT_MAX_KL = 0.3
#: the KL ceiling of a strength chosen by the judge (``choose="judged"``, steering/strength.py): the
#: blind comparison of issue 34 rated the addition best near a probe KL of 0.5 (0.46 aggregate, against
#: 0.31 at the 0.3 budget)
DEFAULT_JUDGED_MAX_KL = 0.6
#: how the addition's gain is chosen (docs/math.md §5d, "Selection and report")
STRENGTH_CHOICES = ("judged", "kl")


def check_positions(positions: Any) -> str:
    """``positions`` of the addition (the config and the run-time hook both check it here)."""
    if positions not in POSITIONS:
        raise bad_argument("positions", positions, f"one of {POSITIONS}",
                           "'skip-first' leaves the first position (the chat template's first token) alone.")
    return positions


#: how the addition's layer scan chooses (docs/math.md §5d, "Selection and report")
LAYER_CHOICES = ("judged", "concept")


def check_max_kl(max_kl: Any) -> float:
    """A KL budget > 0, nats per token."""
    if isinstance(max_kl, bool) or not _finite(max_kl) or float(max_kl) <= 0:
        raise bad_argument("max_kl", max_kl, "a KL budget > 0 in nats per token (e.g. 0.3)",
                           "Smaller budgets change the answers less.")
    return float(max_kl)


# ---- the steering methods' options (steerformer.steering.methods) ---------------------------------
# Each built-in method's config is declared here, not in its module under steering/methods/, for one
# reason: the CLI builds ``steer --help`` from these fields without importing torch (the method
# modules do). :class:`SteerConfig` is their union plus the options of the call itself.
class MethodConfig(Config):
    """A steering method's options: ``option(...)`` fields and :meth:`check`, the method's own rules
    (its values, and the options of other methods it refuses). Standalone, ``__post_init__`` runs
    them; inside :class:`SteerConfig` they run when the call may choose that method."""

    #: the registered name of the method these options belong to
    method_name: ClassVar[str] = ""

    def check(self) -> None:
        """Refuse a bad value of this method's own fields (bad_argument naming the field)."""

    def __post_init__(self) -> None:
        self.check_types()
        self.check()


#: The paper edit's damage budget when its gain is searched (PaperConfig.min_state_cosine): the
#: final states keep a mean cosine >= this with the base model's. Chosen on the bundled MiniLM
#: (docs/math.md §5, docs/steering.md): at 0.9 its sentence search still works, below ~0.8 it does not.
DEFAULT_MIN_STATE_COSINE = 0.9


@dataclasses.dataclass
class PaperConfig(MethodConfig):
    """The papers' rank-1 edit of one attention layer's output matrix, W_O' = W_O + γ u (wᵀV⁺)
    (``steering/methods/paper.py``)."""

    method_name: ClassVar[str] = "paper"

    strength: float | None = option(None, "gain = strength x |lambda1(F_layer)|.", cli_type=float)
    gain: float | None = option(None, "Absolute gain (instead of --strength).", cli_type=float)
    target_alignment: float | None = option(None, "Choose the smallest gain reaching this alignment (the paper's "
                                                   "calibration; default 0.99 where no KL budget applies).",
                                            cli_type=float)
    measure: str = option("model", "Where the target is measured.", choices=MEASURES[::-1])
    solve: str = option("min-norm", "How wᵀV⁺ is obtained.", choices=SOLVES[::-1])
    through_ffn: bool = option(False, "Pre-compensate the FFN (align final states).")
    untie_last: bool = option(False, "ALBERT: give the last layer its own weights.")
    compensate_bias: bool = option(False, "Remove the edit's bias shift through b_O.")
    # None: the budget guards the default target (the call asked for no alignment) and steps aside
    # for a target_alignment the user gives, which the search then reaches as before
    min_state_cosine: float | None = option(None, "Damage budget of the gain search: the largest gain keeps the "
                                                  "final states' mean cosine with the base model's on the probe "
                                                  "sentences at least this (docs/steering.md); 0 = no budget. "
                                                  "Default: 0.9 unless --target-alignment is given.",
                                            cli_type=float)
    dynamics_n_prompts: int = option(30, "Random prompts of the controlled dynamics (measure='dynamics').", cli=False)
    dynamics_tokens: int = option(10, "Tokens per prompt of the controlled dynamics.", cli=False)
    seed: int = option(SEED, "Seed of the random tokens of the controlled dynamics.", cli=False)

    @property
    def target(self) -> float:
        """The alignment target of the paper's calibration (0.99 unless given)."""
        return 0.99 if self.target_alignment is None else float(self.target_alignment)

    @property
    def state_cosine_floor(self) -> float:
        """The damage budget in force: ``min_state_cosine`` when given, else
        :data:`DEFAULT_MIN_STATE_COSINE` for the default target and none for a given target."""
        if self.min_state_cosine is not None:
            return float(self.min_state_cosine)
        return DEFAULT_MIN_STATE_COSINE if self.target_alignment is None else 0.0

    def check(self) -> None:
        if self.solve not in SOLVES:
            raise bad_argument("solve", self.solve, f"one of {SOLVES}")
        if self.measure not in MEASURES:
            raise bad_argument("measure", self.measure, f"one of {MEASURES}")
        if self.strength is not None and self.gain is not None:
            raise bad_argument("gain", self.gain, "either strength= or gain=, not both")
        for name in ("strength", "gain"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not _finite(v) or float(v) == 0):
                raise bad_argument(name, v, "a finite non-zero number (negative steers away from u)",
                                   "Milder steering is a value closer to 0.")
        m = self.min_state_cosine
        if m is not None and (isinstance(m, bool) or not _finite(m) or not 0 <= float(m) < 1):
            raise bad_argument("min_state_cosine", m, "a number in [0, 1): the mean cosine of the final states with "
                               "the base model's that the gain search keeps (0 = no budget)")
        if self.strength is None and self.gain is None and self.target_alignment is not None:
            t = self.target_alignment
            if isinstance(t, bool) or not _finite(t) or not 0 < float(t) < 1:
                raise bad_argument("target_alignment", t, "a number in (0, 1): the mean |cos| wanted")


@dataclasses.dataclass
class AdditionConfig(MethodConfig):
    """Activation addition written as weights after the layer(s), the gain the largest within a KL
    budget (``steering/methods/addition.py``)."""

    method_name: ClassVar[str] = "addition"

    max_kl: float | None = option(None, "KL ceiling, nats/token, teacher-forced on the probe prompts' continuations "
                                         "(the addition method: causal LMs): --choose judged keeps the gain's KL "
                                         f"within it (default {DEFAULT_JUDGED_MAX_KL}); --choose kl takes the "
                                         f"largest gain within it (default {DEFAULT_MAX_KL}).", cli_type=float)
    choose: str = option("judged", "How the addition's gain is chosen: judged (the best mean aggregate of the judge "
                                   "on answers to the selection questions, KL <= --max-kl; the KL rule where the "
                                   "judge rates every gain 0 or the bundled MiniLM is missing) | kl (the largest "
                                   "gain within --max-kl).", choices=STRENGTH_CHOICES)
    positions: str = option("skip-first", "KL-calibrated edit: where the addition acts (all | skip-first: not the "
                                          "first token).", choices=POSITIONS)
    # default "concept": on SmolLM2 the judged choice picked the same layer for 4 of 5 concepts, mean
    # good steers 0.212 vs 0.225, at 2-4x the calibration time (docs/steering-chat.md)
    layer_choice: str = option("concept", "KL-calibrated edit's layer scan: concept (the concept tokens' "
                                          "probability on the probe) | judged (the judge's mean aggregate on "
                                          "short answers to selection questions; concept when MiniLM is "
                                          "missing).", choices=LAYER_CHOICES)

    @property
    def budget(self) -> float:
        """The KL bound in force: ``max_kl`` when given, else the default of ``choose``."""
        if self.max_kl is not None:
            return float(self.max_kl)
        return DEFAULT_JUDGED_MAX_KL if self.choose == "judged" else DEFAULT_MAX_KL

    def check(self) -> None:
        if self.max_kl is not None:
            check_max_kl(self.max_kl)
        check_positions(self.positions)
        if self.choose not in STRENGTH_CHOICES:
            raise bad_argument("choose", self.choose, f"one of {STRENGTH_CHOICES}")
        if self.layer_choice not in LAYER_CHOICES:
            raise bad_argument("layer_choice", self.layer_choice, f"one of {LAYER_CHOICES}")


@dataclasses.dataclass
class AblationConfig(MethodConfig):
    """Directional ablation of the residual-stream writers, W' = (I − s UUᵀ) W
    (``steering/methods/ablation.py``)."""

    method_name: ClassVar[str] = "ablation"
    #: options of the other methods that ablation refuses: it takes layers= and scale=, no layer or gain
    REFUSED: ClassVar[tuple[str, ...]] = ("layer", "gain", "strength", "max_kl")

    scale: float = option(1.0, "--mode ablate: W' = (I - s UU^T) W, s in (0, 1] (Python: also {layer: s}).",
                          flag="--ablate-scale")
    writers: str = option("attention", "--mode ablate: the writers that lose the direction(s), a comma list of "
                                       "attention, mlp, embedding.", flag="--ablate-writers")
    ablate_bias: bool = option(False, "--mode ablate: also b' = (I - s UU^T) b (a LoRA adapter cannot carry it).")
    norm_preserving: str | None = option(None, "--mode ablate: keep each row's norm (Heretic) or each column's.",
                                         choices=NORM_PRESERVING)

    def check(self) -> None:
        check_ablation_scale(self.scale)
        self.writers = ",".join(ablation_writers(self.writers))
        if self.norm_preserving is not None and self.norm_preserving not in NORM_PRESERVING:
            raise bad_argument("norm_preserving", self.norm_preserving, f"None or one of {NORM_PRESERVING}")


#: the built-in methods' configs, by method name (their fields are the options of SteerConfig)
METHOD_CONFIGS: dict[str, type] = {c.method_name: c for c in (PaperConfig, AdditionConfig, AblationConfig)}


def default_of(cls: type, name: str) -> Any:
    """The declared default of field ``name`` of the dataclass ``cls``."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


@dataclasses.dataclass
class SteerConfig(AblationConfig, AdditionConfig, PaperConfig):
    """Options of one steering call (:func:`steerformer.steering.steer`) other than the direction
    and the prompts: the options of the call (``method``, ``layer``, ``report``, ``progress``) and
    those of every built-in method (:data:`METHOD_CONFIGS`). The method is ``method=`` when given
    (``mode="ablate"`` is ``method="ablation"``), else the one whose options are given, else the
    model's head decides (:func:`steerformer.steering.methods.choose_method`)."""

    renamed: ClassVar[dict[str, str]] = {"dynamics_prompts": "dynamics_n_prompts"}

    method: str | None = option(None, "The steering method: paper | addition | ablation, or any registered name "
                                      "(default: addition for a causal LM, else paper; an option of one method "
                                      "chooses it).", cli_type=str)
    layer: int | None = option(None, "Execution layer to edit (negative counts from the end; default: a layer "
                                     "scan for the KL-calibrated edit, else the last layer).", cli_type=int)
    mode: str = option("steer", "steer (toward u; a negative --gain/--strength steers away) | ablate (remove u "
                                "from the writes of --ablate-layers; the same as --method ablation).", choices=MODES)
    report: bool = option(True, "Measure everything the record reports (False: only what the edit needs).", cli=False)
    progress: bool = option(False, "No progress bars on stderr.", invert="--quiet")

    @property
    def edit_layer(self) -> int:
        """The layer of the paper's edit (the last unless given)."""
        return -1 if self.layer is None else int(self.layer)

    @property
    def explicit_method(self) -> str | None:
        """The method named by ``method=`` or ``mode="ablate"`` (None: chosen by the options or the model)."""
        if self.mode == "ablate":
            return "ablation"
        return self.method

    def method_options(self, method: str) -> dict[str, Any]:
        """The fields of ``method``'s built-in config, with this call's values."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(METHOD_CONFIGS[method])}

    def options_of(self, given: Any = ()) -> dict[str, list[str]]:
        """{built-in method: its options this call sets}: the non-default fields and the names in ``given``
        (keywords passed explicitly, even at their default)."""
        given = set(given)
        out: dict[str, list[str]] = {}
        for name, cls in METHOD_CONFIGS.items():
            for f in dataclasses.fields(cls):
                if f.name in given or getattr(self, f.name) != f.default:
                    out.setdefault(name, []).append(f.name)
        return out

    def selected_method(self, given: Any = ()) -> str | None:
        """The method this call names or whose options it sets (None: the model's head decides), after
        refusing options of two methods — the one place the flag rules between methods live."""
        explicit = self.explicit_method
        used = self.options_of(given)
        if explicit == "ablation":
            for name in AblationConfig.REFUSED:
                default = default_of(type(self), name)
                if name in set(given) or getattr(self, name) != default:
                    raise bad_argument(name, getattr(self, name), f"the default ({default}) with "
                                       "mode='ablate'", "Ablation takes layers=[...] (CLI --ablate-layers; default "
                                       "all) and scale= (--ablate-scale), not a layer or a gain.")
            return explicit
        for name in used.pop("ablation", []):
            raise bad_argument(name, getattr(self, name), f"the default ({default_of(AblationConfig, name)!r}) unless "
                               "mode='ablate'", "It is an option of ablation: pass mode='ablate' (CLI --mode ablate).")
        if explicit is not None:
            for other, names in used.items():
                if other != explicit:
                    raise bad_argument(names[0], getattr(self, names[0]), f"no {names[0]} with method={explicit!r} (an "
                                       f"option of the {other} method)", f"Drop it, or pass method={other!r}.")
            return explicit
        if len(used) > 1:  # e.g. the paper's gain with the addition's max_kl (whose budget chooses the gain)
            first, second = list(used)[:2]
            name, other = used[first][0], used[second][0]
            raise bad_argument(name, getattr(self, name), f"no {name} with {other} ({name} is an option of the "
                               f"{first} method, {other} of the {second} method)",
                               f"Pass the options of one method, e.g. drop {name} or {other}.")
        return next(iter(used), None)

    def __post_init__(self) -> None:
        self.check_types()
        if self.mode not in MODES:
            raise bad_argument("mode", self.mode, "'steer' (toward/away from u) or 'ablate' (remove u from the layers' writes)")
        if self.method is not None and (not isinstance(self.method, str) or not self.method):
            raise bad_argument("method", self.method, "a registered method name such as 'paper', 'addition', 'ablation'")
        if self.mode == "ablate" and self.method not in (None, "ablation"):
            raise bad_argument("method", self.method, "'ablation' (or no method) with mode='ablate'")
        method = self.selected_method()
        for name, cls in METHOD_CONFIGS.items():  # each method's rules, where this call may choose it
            if method in (None, name) and not (method is None and name == "ablation"):
                cls.check(self)


# The CLI's flag groups of ``steerformer steer`` other than the steering call's own options: declared
# once here so that ``cli/steer.py`` generates them (``config_options``) instead of spelling them out.
@dataclasses.dataclass
class ContrastiveOptions(Config):
    """Where a contrastive direction's prompts come from (``steer --positive/--negative/--pairs``)."""

    positive: Path | None = option(None, "Contrastive: a text file of positive prompts (one per line).", cli_type=Path)
    negative: Path | None = option(None, "Contrastive: a text file of negative prompts (one per line).", cli_type=Path)
    pairs: Path | None = option(None, 'Contrastive: a JSONL file of {"positive": ..., "negative": ...} lines.',
                                cli_type=Path)
    contrastive_method: str = option("mean-diff", "Contrastive direction: mean-diff | pca.")


#: what ``steer --out`` holds (``--format``)
OUT_FORMATS = ("checkpoint", "peft")


@dataclasses.dataclass
class OutputOptions(Config):
    """What ``steer`` writes to ``--out``."""

    out: Path | None = option(None, "Save the steered checkpoint here.", cli_type=Path)
    format: str = option("checkpoint", "What --out holds: checkpoint (the steered model) | peft (the edits as a LoRA "
                                       "adapter).", choices=OUT_FORMATS)
    lora_rank: int | None = option(None, "--format peft: the rank of a truncated adapter for edits that are not "
                                         "low-rank (--norm-preserving); its error is reported.", cli_type=int)
    overwrite: bool = option(False, "Replace a non-empty --out folder.")


@dataclasses.dataclass
class HubOptions(Config):
    """Uploading the saved folder to the Hub (``steer --push-to-hub``); the fields are
    ``push_to_hub``'s keywords."""

    repo_id: str | None = option(None, "Upload the saved folder to this repo id.", flag="--push-to-hub", cli_type=str)
    private: bool = option(False, "Create the Hub repo as private.")
    revision: str | None = option(None, "Push to this branch (created when missing).", flag="--hub-revision",
                                  cli_type=str)
    create_pr: bool = option(False, "Open a pull request instead of committing.")
    timeout: float = option(30.0, "Seconds each Hub request may wait for an answer.", flag="--hub-timeout")


def renamed(kwargs: dict[str, Any], renames: dict[str, str], where: str) -> dict[str, Any]:
    """``kwargs`` with deprecated keyword names replaced by the new ones, each with a
    DeprecationWarning (the old names are kept for one release; see CHANGELOG.md, "Renamed")."""
    import warnings

    for old, new in renames.items():
        if old in kwargs:
            if new in kwargs:
                raise bad_argument(old, kwargs[old], f"either {old}= (deprecated) or {new}=, not both")
            warnings.warn(f"{where}({old}=...) is deprecated; use {new}=... instead (the old name is removed in "
                          "the next release)", DeprecationWarning, stacklevel=3)
            kwargs[new] = kwargs.pop(old)
    return kwargs


def with_options(config: Config | None, cls: type, options: dict[str, Any], where: str):
    """``config`` (default ``cls()``) with the fields in ``options`` replaced and checked; a keyword
    that is not a field is a TypeError, as for any Python function."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    base = config if config is not None else cls()
    if not isinstance(base, cls):
        raise bad_argument("config", type(base).__name__, f"a {cls.__name__}")
    return dataclasses.replace(base, **options) if options else base


def renamed_parameters(**old_to_new: str):
    """Decorator: the function also takes its parameters' old keyword names (``old=new``), with a
    DeprecationWarning, for one release (listed in CHANGELOG.md under "Renamed")."""
    import functools

    def deco(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            if any(old in kwargs for old in old_to_new):
                kwargs = renamed(kwargs, old_to_new, f.__name__)
            return f(*args, **kwargs)

        return wrapper

    return deco


def progress_bar(progress: Any, desc: str, iterable: Any = None, *, total: float | None = None, unit: str = "it",
                 leave: bool = False):
    """The one progress bar of the package: a tqdm bar on stderr over ``iterable`` (or counting up
    to ``total`` by ``update``) when ``progress`` is true — a string names the bar instead of
    ``desc`` — and a silent one otherwise: the same object either way (iterate it, ``update``,
    ``set_postfix``, ``close``, ``with``). A callable ``progress`` (the old interface) wraps
    ``iterable`` itself, with a DeprecationWarning — ``progress`` is a bool everywhere."""
    from tqdm.auto import tqdm

    if callable(progress) and not isinstance(progress, (bool, str)):
        import warnings

        warnings.warn("progress=<callable> is deprecated; pass progress=True (a tqdm bar) or False",
                      DeprecationWarning, stacklevel=3)
        return progress(iterable) if iterable is not None else tqdm(total=total, disable=True)
    label = progress if isinstance(progress, str) else desc
    return tqdm(iterable, total=total, desc=label, unit=unit, leave=leave, disable=not progress, dynamic_ncols=True)
