"""The registry: the adapter class of each supported ``config.model_type``, and ``get_adapter``."""

from __future__ import annotations

from ..errors import UnsupportedModelError
from .albert import AlbertAdapter
from .base import Adapter
from .bert import BertAdapter
from .declared import DECLARED
from .gpt2 import GPT2Adapter
from .gpt_neo import GPTNeoAdapter
from .roberta import RobertaAdapter, XLMRobertaAdapter

#: The adapter class of each supported ``config.model_type``.
ADAPTERS: dict[str, type[Adapter]] = {
    cls.model_type: cls for cls in (GPT2Adapter, GPTNeoAdapter, BertAdapter, AlbertAdapter, RobertaAdapter, XLMRobertaAdapter,
                                       *DECLARED)
}


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
