"""Architecture adapters, registered by ``config.model_type``.

A Llama-like family is one ``Family(...)`` value in ``declared.py``; an architecture with a storage
quirk is one new module with an :class:`Adapter` subclass plus one entry in ``registry.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .base import Adapter, AttentionWeights, MaskSpec
from .declared import DeclaredAdapter, Family
from .registry import ADAPTERS, get_adapter

# the catalog (``steerformer models``) builds every family's adapter: imported on first use only
_EXPORTS: dict[str, str] = {"FEATURES": ".catalog", "FamilyInfo": ".catalog", "markdown_table": ".catalog",
                            "supported_families": ".catalog"}

__all__ = ["ADAPTERS", "FEATURES", "Adapter", "AttentionWeights", "DeclaredAdapter", "Family", "FamilyInfo", "MaskSpec",
           "get_adapter", "markdown_table", "supported_families"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, public=__all__)

if TYPE_CHECKING:  # static analysers and IDEs see the eager import
    from .catalog import FEATURES, FamilyInfo, markdown_table, supported_families
