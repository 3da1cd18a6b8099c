"""ALBERT: give every layer its own weight group, so an edit of the last layer changes only it.

ALBERT runs layer i with group ⌊i / (L / G)⌋ (MATH.md §1). The only value of G for which that
arithmetic gives the last layer a group of its own is G = L, so untying copies each layer's
shared group into its own slot (the checkpoint grows by (L − 1)/G group copies) and sets
``num_hidden_groups = L``: plain transformers loads it as an ordinary ALBERT. ``retie`` undoes it.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


def group_of_layer(config: Any) -> list[int]:
    L, G = int(config.num_hidden_layers), int(config.num_hidden_groups)
    return [int(i / (L / G)) for i in range(L)]


def untie(model: Any) -> dict:
    """Copy the shared groups so layer i runs group i; returns what ``retie`` needs."""
    cfg = model.config
    groups = group_of_layer(cfg)
    info = {"num_hidden_groups": int(cfg.num_hidden_groups), "group_of_layer": groups}
    encoder = model.base_model.encoder
    encoder.albert_layer_groups = torch.nn.ModuleList(copy.deepcopy(encoder.albert_layer_groups[g]) for g in groups)
    cfg.num_hidden_groups = int(cfg.num_hidden_layers)
    return info


def retie(model: Any, info: dict) -> None:
    """Back to the original groups: group g is the copy held by the first layer that ran it."""
    groups = info["group_of_layer"]
    encoder = model.base_model.encoder
    first = [groups.index(g) for g in range(int(info["num_hidden_groups"]))]
    encoder.albert_layer_groups = torch.nn.ModuleList(encoder.albert_layer_groups[i] for i in first)
    model.config.num_hidden_groups = int(info["num_hidden_groups"])
