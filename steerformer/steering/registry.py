"""The steering methods by name: :class:`Method`, :func:`register_method`, :func:`get_method` and
:func:`choose_method`, the one place a call's method is decided (the contract: the package's
docstring, ``steering/methods/__init__.py``).

Import-light (no torch): the CLI reads the built-in methods' configs here to build ``steer --help``;
a method's plan module (which imports torch) is imported when the method is first used."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, ClassVar

from ..configs import Config, MethodConfig, SteerConfig
from ..errors import bad_argument


@dataclasses.dataclass
class NoOptions(Config):
    """The options of a method that has none."""


class Method:
    """A steering method: its options (``config``, a :class:`~steerformer.configs.Config` dataclass;
    none by default), its plan (what to edit, with what gain), the facts it adds to its records
    (``details``, a :class:`~steerformer.steering.record.Details` dataclass; none by default) and its
    words (the record's summary, the model card's formula, gain and rows, the report page's section,
    the CLI's phase line), each with a generic default. Subclass it, write :meth:`plan`, and register
    it with :func:`register_method`."""

    #: the registered name (set by :func:`register_method`)
    name: ClassVar[str] = ""
    #: the options of the method: a dataclass subclassing steerformer.configs.Config
    config: ClassVar[type] = NoOptions
    #: what the method's records add to the core (``record.details``): a Details dataclass, or None
    details: ClassVar[type | None] = None

    def plan(self, call: Any, cfg: Any) -> Any:
        """The edits of this call (a :class:`~steerformer.steering.lifecycle.Plan`) and what the
        record needs; changes nothing in ``call.model``."""
        raise NotImplementedError(f"{type(self).__name__}.plan")

    def measure(self, call: Any, plan: Any, held: Any) -> dict:
        """Record fields of the edited model (``record.MEASURED``); ``held``: the held-out probe
        measured before the edit (None when ``report=False`` or ``plan.heldout_layer`` is None)."""
        from .measure import default_measure

        return default_measure(call, plan, held)

    def alignment_target(self, record: Any) -> list:
        """What ``record.alignment_model_*`` were measured against (``verify`` recomputes it): the
        direction itself by default."""
        return record.direction

    def plot(self, record: Any, directory: Any) -> list:
        """The method's figures of ``record`` in ``directory`` (``SteeringRecord.plot``): none by default."""
        return []

    # ---- words -------------------------------------------------------------------------------
    def summary_lines(self, record: Any) -> list[str]:
        """The record's human-readable lines (``SteeringRecord.summary``; the CLI prints them)."""
        f = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
        layers = sorted({e.layer for e in record.edits}) or [record.layer]
        lines = [f"{record.method or 'steering'}: {len(record.edits)} edit(s) of layer(s) {layers} "
                 f"({', '.join(dict.fromkeys(e.module for e in record.edits))}), gain {record.gain:.6g}",
                 f"alignment, real model final states: {f(record.alignment_model_before)} -> "
                 f"{f(record.alignment_model_after)}",
                 f"weight change |dW|/|W| = {record.weight_change:.4g}; KL ({record.kl_kind}) = {f(record.kl)}; "
                 f"state cosine = {f(record.state_cosine)}"]
        return lines + ([record.message] if record.message else []) + self.evaluation_lines(record)

    @staticmethod
    def evaluation_lines(record: Any) -> list[str]:
        """The lines of the record's judged evaluation (``evaluate_record``), whatever the method: none
        before one ran."""
        ev = record.evaluation
        if not ev:
            return []
        lines = [f"evaluation: concept rate {ev['concept_rate']:.2f} (base {ev['base_concept_rate']:.2f}), "
                 f"KL on the held-out answers {ev['kl']:.3f}, distinct-2 {ev['distinct2']:.2f}"
                 + (f", fluency {ev['fluency']:.2f}" if ev.get("fluency") is not None else "")]
        if ev.get("aggregate") is not None:
            lines.append(f"judged ({ev.get('judge')}): concept {ev['judge_concept']:.2f}, relevance "
                         f"{ev['judge_relevance']:.2f}, fluency {ev['judge_fluency']:.2f} (0-2), aggregate "
                         f"{ev['aggregate']:.2f}, good steers {ev['good']:.2f}")
        return lines

    def card_formula(self, record: Any) -> str:
        """The formula of what ``record`` changed, for the model card."""
        return "W' = W + γ Σ_k u_k a_kᵀ (a low-rank edit of each writer named in the record)"

    def gain_text(self, record: Any) -> str:
        """The gain in the unit the CLI printed, for the model card."""
        return f"γ = {record.gain:.6g}"

    def facts(self, record: Any) -> list[tuple[str, str]]:
        """The method's rows of the model card's and the report page's table of the edit (how the gain
        was chosen, what it bounds...), beside the rows every record has: none by default."""
        return []

    def report_section(self, record: Any) -> dict | None:
        """The method's own section of the report page, as data the page renders (no HTML here):
        ``{"title", "text", "table": {"header", "rows"}, "dose": {"budget", "probe", "note"}}``, every
        key optional (``dose``: what the evaluation's dose curve marks — the budget, the probe's KL
        at each strength as (x × the chosen gain, KL), a note). None: no section."""
        return None

    def phase_line(self, cfg: Any, call_config: Any, layers: Any, *, causal: bool, concept: bool) -> str:
        """The line ``steer`` says before its long silent work (when progress is shown)."""
        return f"steering with the {self.name} method ..."


_METHODS: dict[str, type] = {}

#: the built-in methods: name -> (the module that registers it, the torch-free module of its config
#: or None). The plan module is imported on first use of the name (steering a causal LM imports
#: ``addition`` only); the config modules are read by the CLI and by :func:`choose_method`.
BUILT_IN: dict[str, tuple[str, str | None]] = {
    "paper": (".methods.paper.method", ".methods.paper.config"),
    "addition": (".methods.addition.method", ".methods.addition.config"),
    "ablation": (".methods.ablation.method", ".methods.ablation.config"),
}


def _load_built_in(name: str) -> None:
    """Import the built-in method ``name`` (its module registers it) unless it is registered."""
    if name in BUILT_IN and name not in _METHODS:
        importlib.import_module(BUILT_IN[name][0], __package__)


def built_in_configs() -> dict[str, type]:
    """{name: config class} of the built-in methods whose config is a torch-free module (the classes
    are the :class:`~steerformer.configs.MethodConfig` subclasses defined there); the CLI makes their
    fields ``steer``'s flags, and their options choose their method."""
    return {name: config_of(name) for name, (_, where) in BUILT_IN.items() if where is not None}


def register_method(name: str, cls: type | None = None, *, replace: bool = False) -> Any:
    """Register the :class:`Method` subclass ``cls`` under ``name`` (``sf.steer(model, method=name)``,
    ``steerformer steer --method NAME``); without ``cls``, a class decorator. Registering another
    class under a taken name is refused unless ``replace=True``."""
    if cls is None:
        return lambda c: register_method(name, c, replace=replace)
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise bad_argument("name", name, "a non-empty method name without surrounding spaces")
    if not (isinstance(cls, type) and issubclass(cls, Method)) or cls.plan is Method.plan:
        raise bad_argument("cls", getattr(cls, "__name__", cls), "a subclass of steerformer.steering.methods.Method "
                           "with its own plan(call, cfg)")
    if not (isinstance(cls.config, type) and issubclass(cls.config, Config) and dataclasses.is_dataclass(cls.config)):
        raise bad_argument("cls", cls.__name__, "a Method whose config is a dataclass subclassing "
                           "steerformer.configs.Config", "Declare its options with configs.option(...).")
    _load_built_in(name)  # a built-in name is taken before its module is imported (its own import: a no-op)
    if _METHODS.get(name, cls) is not cls and not replace:
        raise bad_argument("name", name, f"a name not taken (it is {_METHODS[name].__name__}'s)",
                           "Pick another name, or pass replace=True.")
    cls.name = name
    _METHODS[name] = cls
    return cls


def method_names() -> list[str]:
    """The registered method names, sorted."""
    return sorted({*_METHODS, *BUILT_IN})


def get_method(name: str) -> Method:
    """The registered method ``name`` (an instance of its class)."""
    if isinstance(name, str):
        _load_built_in(name)
    if name not in _METHODS:
        raise bad_argument("method", name, f"one of {', '.join(method_names())}",
                           "A method from outside steerformer registers with register_method(name, cls) first.")
    return _METHODS[name]()


def details_of(name: Any) -> type | None:
    """The details dataclass of the registered method ``name`` (None: none, or not registered here)."""
    return type(get_method(name)).details if isinstance(name, str) and name in set(method_names()) else None


def method_of(record: Any) -> Method:
    """The method that made ``record`` (its words), or the generic :class:`Method` when that name is
    not registered here (a record made with a method from elsewhere)."""
    name = getattr(record, "method", None)
    return get_method(name) if name in BUILT_IN or name in _METHODS else Method()


def config_of(name: str) -> type:
    """The config class of method ``name`` (a built-in's torch-free config, no plan import)."""
    where = BUILT_IN.get(name, (None, None))[1]
    if where is None:
        return type(get_method(name)).config
    mod = importlib.import_module(where, __package__)
    return next(v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, MethodConfig)
                and v is not MethodConfig and v.__module__ == mod.__name__)


def choose_method(call_config: SteerConfig, options: dict, head: str | None = None) -> str | None:
    """The method of a call: ``call_config.method`` when given, else the built-in method whose options
    ``options`` holds (options of two methods are refused by name), else by the model's ``head``
    (``measure.head_kind``) — a causal LM, whose output a KL can price, gets ``addition``; every other
    model the papers' edit, ``paper``. ``head=None``: the model is not known yet (None when the head
    would decide). The one place the default is stated."""
    # the built-in configs are read only when options are given (a plain call imports its own method alone)
    owner = {f.name: name for name, cls in built_in_configs().items() for f in dataclasses.fields(cls)} \
        if options else {}
    named = call_config.method
    if named is not None:
        cls = config_of(named)
        fields = {f.name for f in dataclasses.fields(cls)}
        for key in options:
            if key not in fields:
                if key in owner:
                    raise bad_argument(key, options[key], f"no {key} with method={named!r} (an option of the "
                                       f"{owner[key]} method)", f"Drop it, or pass method={owner[key]!r}.")
                raise TypeError(f"steer(method={named!r}) got an unexpected keyword argument {key!r}")
        chosen = named
    else:
        used: dict[str, list[str]] = {}
        for key in options:
            if key not in owner:
                raise TypeError(f"steer() got an unexpected keyword argument {key!r}")
            used.setdefault(owner[key], []).append(key)
        if len(used) > 1:  # e.g. the paper's gain with the addition's max_kl (whose budget chooses the gain)
            (first, a), (second, b) = list(used.items())[:2]
            raise bad_argument(a[0], options[a[0]], f"no {a[0]} with {b[0]} ({a[0]} is an option of the {first} "
                               f"method, {b[0]} of the {second} method)",
                               f"Pass the options of one method, e.g. drop {a[0]} or {b[0]}.")
        chosen = next(iter(used), None)
        if chosen is None and head is not None:
            chosen = "addition" if head == "causal-lm" else "paper"
    if chosen is not None:
        cls = config_of(chosen)
        need = getattr(cls, "needs_head", None)
        if head is not None and need is not None and head != need and options:
            key = next(iter(options))
            raise bad_argument(key, options[key], f"a {need} model: {key} is an option of the {chosen} method, which "
                               f"this {head} model cannot run", f"Drop {key}; this model gets another method.")
        for key in getattr(cls, "refuses", ()):
            value = getattr(call_config, key)
            default = next(f.default for f in dataclasses.fields(SteerConfig) if f.name == key)
            if value != default:
                raise bad_argument(key, value, f"the default ({default}) with method={chosen!r}",
                                   f"The {chosen} method does not take {key}=; drop it.")
    return chosen


def call_options(config: Any, method: str | None, options: dict) -> tuple[SteerConfig, dict, Any]:
    """(the call's SteerConfig, the method's options by keyword, a method config given as ``config``)
    from ``steer``'s ``config``, ``method`` and keywords. ``config`` may be a SteerConfig or a
    method's config (it names the method unless ``method`` does)."""
    fields = {f.name for f in dataclasses.fields(SteerConfig)}
    own = {k: options.pop(k) for k in list(options) if k not in fields}
    base, given_config = config, None
    if config is not None and not isinstance(config, SteerConfig):
        given_config, base = config, None
        if isinstance(config, Config) and method is None:
            method = next((n for n in method_names() if config_of(n) is type(config)), None)
        if not isinstance(config, Config) or method is None:  # not a config, or of no registered method
            raise bad_argument("config", type(config).__name__, "a SteerConfig or the config of a registered method",
                               f"Registered: {', '.join(method_names())}.")
    if method is not None:
        options["method"] = method
    base = base if base is not None else SteerConfig()
    return (dataclasses.replace(base, **options) if options else base), own, given_config


def method_config(method: Method, options: dict, config: Any = None) -> Any:
    """The options ``method.plan`` receives: ``method.config`` built from ``config`` (a config of this
    method given to ``steer``) and the method's keywords (checked by its ``__post_init__``)."""
    cls = type(method).config
    if not isinstance(config, cls):
        return cls(**options)
    return dataclasses.replace(config, **options) if options else config


__all__ = ["Method", "NoOptions", "built_in_configs", "call_options", "choose_method", "config_of", "details_of",
           "get_method", "method_config", "method_names", "method_of", "register_method"]
