"""The registry: the adapter class of each supported ``config.model_type``, and ``get_adapter``."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from ..errors import UnsupportedModelError
from .base import Adapter
from .declared import DECLARED

#: ``model_type -> (module, class)`` of each hand-written adapter (an architecture with a storage quirk).
#: The module is imported on the first lookup of its model type, so steering a GPT-2 does not import
#: the encoders' adapters.
HAND_WRITTEN: dict[str, tuple[str, str]] = {
    "gpt2": (".gpt2", "GPT2Adapter"),
    "gpt_neo": (".gpt_neo", "GPTNeoAdapter"),
    "bert": (".bert", "BertAdapter"),
    "albert": (".albert", "AlbertAdapter"),
    "roberta": (".roberta", "RobertaAdapter"),
    "xlm-roberta": (".roberta", "XLMRobertaAdapter"),
}


class AdapterTable(Mapping):
    """``model_type -> adapter class``: the declared families, and the hand-written ones imported from
    :data:`HAND_WRITTEN` on first lookup (a read-only mapping, so ``ADAPTERS[t]``, ``t in ADAPTERS``
    and ``sorted(ADAPTERS)`` work as with a dict)."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Adapter]] = {cls.model_type: cls for cls in DECLARED}
        self._types = sorted({*HAND_WRITTEN, *self._classes})

    def __getitem__(self, model_type: str) -> type[Adapter]:
        cls = self._classes.get(model_type)
        if cls is None:
            module, name = HAND_WRITTEN[model_type]  # KeyError for an unknown type, as a dict
            cls = getattr(importlib.import_module(module, __package__), name)
            self._classes[model_type] = cls
        return cls

    def __contains__(self, model_type: object) -> bool:
        return model_type in HAND_WRITTEN or model_type in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)


#: The adapter class of each supported ``config.model_type``.
ADAPTERS: Mapping[str, type[Adapter]] = AdapterTable()


def get_adapter(config) -> Adapter:
    """The adapter for ``config.model_type``; an error listing the supported types otherwise."""
    model_type = getattr(config, "model_type", None)
    cls = ADAPTERS.get(model_type)
    if cls is None:
        raise UnsupportedModelError(
            f"model_type={model_type!r} is not supported by steerformer; supported model types: "
            f"{', '.join(sorted(ADAPTERS))}. Adding one is a Family(...) in steerformer/adapters/declared.py "
            "(docs/adding-a-family.md)."
        )
    return cls(config)
