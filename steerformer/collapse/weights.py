"""Random weights for the collapse variants, drawn with the model's own initializer."""

from __future__ import annotations

import contextlib
import itertools
from typing import Iterator, Sequence

import torch


def pass_seed(seed: int, pass_index: int) -> int:
    """Seed of the weights used in pass ``pass_index`` (0-based). The reference code seeds 42 for
    the first draw and 42 + i + 1 before pass i + 1; this is the same scheme."""
    return int(seed) + int(pass_index)


def ffn_modules(looped) -> list[tuple[torch.nn.Module, str]]:
    """(block, child name) of every weight-holding child of a block that the block run without FFN
    leaves unused (GPT-2/GPT-Neo: ``ln_2`` and ``mlp``), found by running the first block once
    without FFN on two zero tokens with a hook on each child — so no family list is needed."""
    block = looped.blocks[0]
    called: set[str] = set()
    hooks = [child.register_forward_pre_hook(lambda m, a, name=name: called.add(name))
             for name, child in block.named_children()]
    p = next(looped.model.parameters())
    try:
        h = torch.zeros(1, 2, looped.adapter.d_model, dtype=p.dtype, device=p.device)
        with torch.no_grad():
            looped.adapter.run_block(block, h, looped.masks(2, p.dtype, p.device)[0], ffn=False)
    finally:
        for hk in hooks:
            hk.remove()
    names = [n for n, c in block.named_children() if n not in called and any(True for _ in c.parameters())]
    seen: dict[int, torch.nn.Module] = {}
    for b in looped.blocks:
        seen.setdefault(id(b), b)
    return [(b, n) for b in seen.values() for n in names]


@contextlib.contextmanager
def swapped_out(modules: Sequence[tuple[torch.nn.Module, str]]) -> Iterator[None]:
    """Replace each ``parent.name`` by a parameterless ``nn.Identity`` for the duration, as the
    reference code's ``patch_skip_mlp`` does (``block.ln_2 = nn.Identity(); block.mlp = ZeroMLP()``)."""
    saved = [(parent, name, getattr(parent, name)) for parent, name in modules]
    try:
        for parent, name, _ in saved:
            setattr(parent, name, torch.nn.Identity())
        yield
    finally:
        for parent, name, mod in saved:
            setattr(parent, name, mod)


def reinitialize(model: torch.nn.Module, seed: int,
                 without: Sequence[tuple[torch.nn.Module, str]] | None = None) -> None:
    """Overwrite every weight of ``model`` in place with a fresh draw of its own ``_init_weights``,
    seeded with ``seed``; the caller's global RNG state is left untouched.

    ``without``: modules (``(parent, name)``, see :func:`ffn_modules`) swapped out during the draw,
    so they keep their weights and consume no random numbers. The reference code re-initializes
    the no-FFN model *after* swapping its MLPs for a parameterless module (GPTConsensus.py:
    ``patch_skip_mlp(model)`` at the start of ``consensus()``, then per pass ``torch.manual_seed(S);
    reset_parameters_in_place(model); patch_skip_mlp(model)``), so its random stream skips the MLP
    weights; passing the FFN modules here reproduces that stream bit for bit.
    """
    # transformers 5 marks loaded tensors `_is_hf_initialized` and its init functions then skip
    # them: clear the marks, or a "random" run would silently keep the pretrained weights.
    for obj in itertools.chain(model.modules(), model.parameters(), model.buffers()):
        if getattr(obj, "_is_hf_initialized", False):
            obj._is_hf_initialized = False
    devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices), torch.no_grad(), swapped_out(without or ()):
        torch.manual_seed(int(seed))
        model.apply(model._init_weights)
