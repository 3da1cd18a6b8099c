"""Architecture adapters, registered by ``config.model_type``.

A Llama-like family is one ``Family(...)`` value in ``declared.py``; an architecture with a storage
quirk is one new module with an :class:`Adapter` subclass plus one entry in ``registry.py``.
"""

from __future__ import annotations

from .base import Adapter, AttentionWeights, MaskSpec
from .catalog import FEATURES, FamilyInfo, markdown_table, supported_families
from .declared import DeclaredAdapter, Family
from .registry import ADAPTERS, get_adapter

__all__ = ["ADAPTERS", "FEATURES", "Adapter", "AttentionWeights", "DeclaredAdapter", "Family", "FamilyInfo", "MaskSpec",
           "get_adapter", "markdown_table", "supported_families"]
