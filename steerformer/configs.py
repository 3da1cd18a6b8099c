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
        layers = [layers]
    out = []
    for k in layers:
        if not is_whole(k):  # True is no layer 1, 1.0 no layer
            raise bad_argument(name, list(layers), f"layer indices (whole numbers, not {type(k).__name__}) in "
                               f"[-{n_layers}, {n_layers - 1}] (the model has {n_layers} layers)")
        if not -n_layers <= k < n_layers:
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
    """Shared behaviour of the option dataclasses: ``to_dict``, ``from_dict``, ``check_types``, ``differences``."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (paths as strings, tuples as lists)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """A config from a dict (e.g. a stored run), ignoring keys that are not fields."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def check_types(self) -> None:
        """Every field declared ``int`` (or ``int | None``) holds a whole number — not a float, a
        string or a bool — and every ``bool`` field a bool: ``layer=0.5`` is one clear error here,
        not a TypeError deep in the code that indexes with it."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            kind = str(f.type).replace(" ", "")
            if kind in ("int", "int|None") and not (v is None and kind != "int" or is_whole(v)):
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


def is_whole(v: Any) -> bool:
    """An int or a NumPy integer, not a bool (to Python, True is 1: a layer, a count or a key given as
    True is a mistake, never layer 1)."""
    return not isinstance(v, bool) and (isinstance(v, int) or type(v).__name__.startswith(("int", "uint")))


def finite(v: Any) -> bool:
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
        if isinstance(self.alpha, bool) or not finite(self.alpha) or not 0 < float(self.alpha) < 1:
            raise bad_argument("alpha", self.alpha, "a test level in (0, 1), e.g. 0.05")
        if self.correction not in CORRECTIONS:
            raise bad_argument("correction", self.correction, f"one of {', '.join(CORRECTIONS)}")
        if isinstance(self.ci, bool) or not finite(self.ci) or not (float(self.ci) == 0 or 0 < float(self.ci) < 1):
            raise bad_argument("ci", self.ci, "a confidence level in (0, 1), e.g. 0.95, or 0 for no intervals")
        _positive_int("bootstrap", self.bootstrap, "a number of resamples >= 100, e.g. 1000", low=100)
        _positive_int("seeds", self.seeds, "an integer K >= 1 (token seeds seed..seed+K-1)")
        if self.layer_norm is not None and type(self.layer_norm).__name__ not in ("bool", "bool_"):
            raise bad_argument("layer_norm", self.layer_norm, "True, False or None (both, for pre-LN models)")
        if not finite(self.tau):
            raise bad_argument("tau", self.tau, "a finite step size")


WEIGHTS = ("pretrained", "random", "random-per-pass")
E_PRECISIONS = ("float64", "states")


@dataclasses.dataclass
class CollapseConfig(Config):
    """Options of the looped-model collapse experiment (consensus paper §5.2). The default seed 42
    is the reference code's."""

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
        if self.early_stop_tol is not None and not (finite(self.early_stop_tol) and self.early_stop_tol > 0):
            raise bad_argument("early_stop_tol", self.early_stop_tol, "a positive tolerance on E, or None")
        if self.e_precision not in E_PRECISIONS:
            raise bad_argument("e_precision", self.e_precision, f"one of {', '.join(E_PRECISIONS)}")


#: where the KL-calibrated addition acts: every position, or all but the first (the chat template's first token)
POSITIONS = ("skip-first", "all")
#: the KL budget of the addition method (the largest gain within it), nats per token on the probe
#: continuations: chosen on the rated development set (benchmarks/ratings/; docs/steering-chat.md, "The
#: default, chosen on rated answers"), where 0.5 rated best of 0.3 / 0.5 / 0.7 / 1.0
DEFAULT_MAX_KL = 0.5


def check_positions(positions: Any) -> str:
    """``positions`` of the addition (the config and the run-time hook both check it here)."""
    if positions not in POSITIONS:
        raise bad_argument("positions", positions, f"one of {POSITIONS}",
                           "'skip-first' leaves the first position (the chat template's first token) alone.")
    return positions


def check_max_kl(max_kl: Any) -> float:
    """A KL budget > 0, nats per token."""
    if isinstance(max_kl, bool) or not finite(max_kl) or float(max_kl) <= 0:
        raise bad_argument("max_kl", max_kl, "a KL budget > 0 in nats per token (e.g. 0.3)",
                           "Smaller budgets change the answers less.")
    return float(max_kl)


# ---- the steering call's options (steerformer.steering.steer) -------------------------------------
class MethodConfig(Config):
    """A steering method's options (``steering/methods/<name>/config.py``): ``option(...)`` fields and
    :meth:`check`, the method's own rules. ``__post_init__`` runs them. A method's options choose
    it when no method is named (``steering.methods.choose_method``)."""

    #: the call's own options (:class:`SteerConfig` fields) this method refuses at a non-default value
    refuses: ClassVar[tuple[str, ...]] = ()
    #: the model head this method needs ("causal-lm": its budget is a KL of next-token
    #: distributions), or None for any; an option of the method on another head is refused by name
    needs_head: ClassVar[str | None] = None

    def check(self) -> None:
        """Refuse a bad value of this method's own fields (bad_argument naming the field)."""

    def __post_init__(self) -> None:
        self.check_types()
        self.check()


@dataclasses.dataclass
class SteerConfig(Config):
    """The options of one steering call (:func:`steerformer.steering.steer`) that every method shares:
    which method, the layer, what is measured, the progress bars. Each method's own options are its
    config (``steering/methods/<name>/config.py``); which method a call runs is decided once, in
    :func:`steerformer.steering.methods.choose_method`."""

    method: str | None = option(None, "The steering method: paper | addition | ablation, or any registered name "
                                      "(default: addition for a causal LM, else paper; an option of one method "
                                      "chooses it).", cli_type=str)
    layer: int | None = option(None, "Execution layer to edit (negative counts from the end; default: a layer "
                                     "scan for the KL-calibrated edit, else the last layer).", cli_type=int)
    report: bool = option(True, "Measure everything the record reports (False: only what the edit needs).", cli=False)
    progress: bool = option(False, "No progress bars on stderr.", invert="--quiet")

    @property
    def edit_layer(self) -> int:
        """The layer of a one-layer edit (the last unless given)."""
        return -1 if self.layer is None else int(self.layer)

    def __post_init__(self) -> None:
        self.check_types()
        if self.method is not None and (not isinstance(self.method, str) or not self.method):
            raise bad_argument("method", self.method, "a registered method name such as 'paper', 'addition', 'ablation'")


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


@dataclasses.dataclass
class OutputOptions(Config):
    """What ``steer`` writes to ``--out`` (the steered checkpoint; every other format is
    ``steerformer export``'s, from that checkpoint)."""

    out: Path | None = option(None, "Save the steered checkpoint here (other formats: steerformer export).",
                              cli_type=Path)
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


def progress_bar(progress: Any, desc: str, iterable: Any = None, *, total: float | None = None, unit: str = "it",
                 leave: bool = False):
    """The one progress bar of the package: a tqdm bar on stderr over ``iterable`` (or counting up
    to ``total`` by ``update``) when ``progress`` is true — a string names the bar instead of
    ``desc`` — and a silent one otherwise: the same object either way (iterate it, ``update``,
    ``set_postfix``, ``close``, ``with``)."""
    from tqdm.auto import tqdm

    label = progress if isinstance(progress, str) else desc
    return tqdm(iterable, total=total, desc=label, unit=unit, leave=leave, disable=not progress, dynamic_ncols=True)
