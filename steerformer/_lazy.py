"""Lazy package faces (PEP 562): a package's public names are imported from their submodules on
first use, so that ``import steerformer`` (and ``steerformer --help``) loads nothing heavy and one
call (``sf.steer``) imports only the modules it runs.

A package calls :func:`lazy_exports` once with its table of ``public name -> submodule``; its
``__getattr__``, ``__dir__`` and module class come from here, so that every package face behaves
the same way.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable, Iterable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str], submodules: Iterable[str] = (),
                 public: Iterable[str] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public names live in submodules.

    ``exports``: public name -> submodule that defines it, relative (``".chain"``). ``submodules``:
    subpackages reachable as attributes (``steerformer.ode``). ``public``: further names of
    ``__all__`` that ``__dir__`` lists. A resolved name is cached in the package's namespace.

    A public function named like the submodule that defines it (``steerformer.analyze``,
    ``steerformer.steering.steer``) stays the function: importing the submodule makes Python set
    the package attribute to the module, which the package's class refuses for those names.
    """
    module = sys.modules[package]
    namespace = vars(module)
    shadowed = frozenset(n for n, where in exports.items() if where == f".{n}")
    subs = frozenset(submodules)
    listed = sorted({*exports, *subs, *public})

    if shadowed:
        class LazyPackage(types.ModuleType):
            def __setattr__(self, name: str, value: Any) -> None:
                if name in shadowed and isinstance(value, types.ModuleType):
                    return  # the submodule stays in sys.modules; the attribute is the public function
                super().__setattr__(name, value)

        module.__class__ = LazyPackage

    def __getattr__(name: str) -> Any:
        """Import the submodule that defines ``name`` on first use and cache the value."""
        where = exports.get(name)
        if where is not None:
            value = getattr(importlib.import_module(where, package), name)
        elif name in subs:
            value = importlib.import_module(f".{name}", package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *listed})

    return __getattr__, __dir__
