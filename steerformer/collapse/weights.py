"""Random weights for the collapse variants, drawn with the model's own initializer."""

from __future__ import annotations

import itertools

import torch


def pass_seed(seed: int, pass_index: int) -> int:
    """Seed of the weights used in pass ``pass_index`` (0-based). The reference code seeds 42 for
    the first draw and 42 + i + 1 before pass i + 1; this is the same scheme."""
    return int(seed) + int(pass_index)


def reinitialize(model: torch.nn.Module, seed: int) -> None:
    """Overwrite every weight of ``model`` in place with a fresh draw of its own ``_init_weights``,
    seeded with ``seed``; the caller's global RNG state is left untouched."""
    # transformers 5 marks loaded tensors `_is_hf_initialized` and its init functions then skip
    # them: clear the marks, or a "random" run would silently keep the pretrained weights.
    for obj in itertools.chain(model.modules(), model.parameters(), model.buffers()):
        if getattr(obj, "_is_hf_initialized", False):
            obj._is_hf_initialized = False
    devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(int(seed))
        model.apply(model._init_weights)
