"""The steering methods by name: :class:`Method`, :func:`register_method`, :func:`get_method` and
:func:`choose_method`, the one place the default method is chosen (the contract: the package's
docstring, ``steering/methods/__init__.py``)."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, ClassVar

from ...configs import METHOD_CONFIGS, Config, SteerConfig, with_options
from ...errors import bad_argument
from ..lifecycle import Call, Plan, default_measure


class Method:
    """A steering method: its options (``config``, a :class:`~steerformer.configs.Config`
    dataclass) and its plan (what to edit, with what gain). Subclass it, set ``config``, write
    :meth:`plan` (and, optionally, :meth:`measure`), and register it with :func:`register_method`."""

    #: the registered name (set by :func:`register_method`)
    name: ClassVar[str] = ""
    #: the options of the method: a dataclass subclassing steerformer.configs.Config
    config: ClassVar[type] = Config

    def plan(self, call: Call, cfg: Any) -> Plan:
        """The edits of this call and what the record needs; changes nothing in ``call.model``."""
        raise NotImplementedError(f"{type(self).__name__}.plan")

    def measure(self, call: Call, plan: Plan, held: Any) -> dict:
        """Record fields of the edited model (``record.MEASURED``); ``held``: the held-out probe
        measured before the edit (None when ``report=False`` or ``plan.heldout_layer`` is None)."""
        return default_measure(call, plan, held)


_METHODS: dict[str, type] = {}

#: the built-in methods: name -> the module that registers it, imported on first use of the name
#: (steering a causal LM imports ``addition`` only)
BUILT_IN: dict[str, str] = {"paper": ".paper", "addition": ".addition", "ablation": ".ablation",
                             "distilled": ".distilled"}


def _load_built_in(name: str) -> None:
    """Import the built-in method ``name`` (its module registers it) unless it is registered."""
    if name in BUILT_IN and name not in _METHODS:
        importlib.import_module(BUILT_IN[name], __package__)


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


def choose_method(cfg: Any, head: str, given: Any = ()) -> str:
    """The method of a call: the one named (``method=``, ``mode="ablate"``) or whose options are set
    (``SteerConfig.selected_method``), else by the model's head (``measure.head_kind``) — a causal LM,
    whose output a KL can price, gets ``addition``; every other model the papers' edit, ``paper``."""
    name = cfg.selected_method(given)
    if name is not None:
        return name
    return "addition" if head == "causal-lm" else "paper"


def call_options(config: Any, method: str | None, options: dict, where: str) -> tuple[Any, dict, set]:
    """(the call's SteerConfig, the keywords that are not SteerConfig fields — a registered method's
    own options —, the names given explicitly) from ``steer``'s ``config``, ``method`` and keywords.
    ``config`` may be a SteerConfig, a built-in method's config (its fields join the SteerConfig) or
    a registered method's config (it names the method)."""
    fields = {f.name for f in dataclasses.fields(SteerConfig)}
    own = {k: options.pop(k) for k in list(options) if k not in fields}
    given = set(options)
    base = config
    if config is not None and not isinstance(config, SteerConfig):
        name = next((n for n, c in METHOD_CONFIGS.items() if type(config) is c), None) \
            or next((n for n, c in _METHODS.items() if type(config) is c.config), None)
        if name is None:
            raise bad_argument("config", type(config).__name__, "a SteerConfig or the config of a registered method",
                               f"Registered: {', '.join(method_names())}.")
        base = SteerConfig(method=name, **config.to_dict()) if type(config) in METHOD_CONFIGS.values() \
            else SteerConfig(method=name)
    if method is not None:
        options["method"] = method
    return with_options(base, SteerConfig, options, where), own, given


def method_config(method: Method, steer_config: Any, options: dict, config: Any = None) -> Any:
    """The options ``method.plan`` receives: the call's SteerConfig itself for a built-in method (its
    config is one of SteerConfig's bases), else ``method.config`` built from ``config`` and the
    keywords that are not SteerConfig fields (refused by name when the method has no such field)."""
    if isinstance(steer_config, method.config):
        if options:
            raise TypeError(f"steer() got an unexpected keyword argument {sorted(options)[0]!r}")
        return steer_config
    names = {f.name for f in dataclasses.fields(method.config)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"steer(method={method.name!r}) got an unexpected keyword argument {unknown[0]!r}")
    base = config if isinstance(config, method.config) else method.config()
    return dataclasses.replace(base, **options) if options else base


__all__ = ["Method", "call_options", "choose_method", "get_method", "method_config", "method_names", "register_method"]
