"""Block inputs cached once, blocks re-run from them: the training's forward from the first edited
layer on (the blocks below it never change, so they run once per batch, without gradients).

:func:`block_inputs` is the one "run until block k, capture, stop" of the method: its hooks are
placed inside ``try`` and removed in ``finally``, whatever the forward raises (a hook left on the
user's model would break every later call)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from ....errors import bad_argument
from ....prompts import PromptBatch


class _Stop(Exception):
    """Raised inside the forward once the last block's inputs are captured (the rest is skipped)."""


@dataclasses.dataclass
class BlockCalls:
    """The inputs (args, kwargs) of execution layers ``start``… on one batch of token rows, and which
    positions predict an answer token (``select``: the last prompt token … the answer's second-to-last)."""

    calls: list  # [(block path, args, kwargs)] for layers start, start+1, ..., the last
    start: int
    select: torch.Tensor  # (B, n) bool
    row: torch.Tensor  # (N,) the row each selected position belongs to
    n_rows: int


@torch.no_grad()
def block_inputs(model: Any, adapter: Any, batch: PromptBatch, start: int) -> list:
    """[(block path, args, kwargs)] of execution layers ``start``… on ``batch``: one forward pass,
    cut right after the last block's inputs are captured (no head, no logits). ``start`` is checked
    against the model before any hook is placed; every hook is removed on return and on any error."""
    seq = adapter.layer_sequence()
    if not isinstance(start, int) or not 0 <= start < len(seq):
        raise bad_argument("layers", start, f"execution layers in [0, {len(seq) - 1}] (the model has {len(seq)})")
    base = model.base_model
    names = [adapter.layer_block(seq[k]) for k in range(start, len(seq))]
    modules = [base.get_submodule(n) for n in names]  # resolved before any hook: a bad path places none
    calls: list = []

    def stop(m, a, kw):
        raise _Stop

    handles = []
    kw = {"use_cache": False} if getattr(model.config, "use_cache", None) is not None else {}
    try:
        for n, m in zip(names, modules):
            handles.append(m.register_forward_pre_hook(lambda m, a, k, n=n: calls.append((n, a, dict(k))),
                                                       with_kwargs=True))
        handles.append(modules[-1].register_forward_pre_hook(stop, with_kwargs=True))  # after the capture
        base(**batch.inputs(), **kw)
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    if len(calls) != len(names):
        raise RuntimeError(f"expected {len(names)} block calls from layer {start}, saw {len(calls)}: "
                           f"adapter.layer_block is wrong for {type(model).__name__}")
    return calls


def answer_rows(prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], pad: int,
                device: Any) -> tuple[PromptBatch, torch.Tensor, torch.Tensor]:
    """(prompt + answer rows right-padded, select (B, n): the positions predicting each answer token,
    row (N,): the row of each selected position, row-major as ``tensor[select]`` orders them)."""
    rows = [list(p) + list(a) for p, a in zip(prompts, answers)]
    batch = PromptBatch.from_rows(rows, pad_id=pad).to(device)
    select = torch.zeros_like(batch.attention_mask, dtype=torch.bool)
    row = []
    for i, (p, a) in enumerate(zip(prompts, answers)):
        select[i, len(p) - 1:len(p) - 1 + len(a)] = True
        row += [i] * len(a)
    return batch, select, torch.tensor(row, dtype=torch.long, device=device)


def cached(model: Any, adapter: Any, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], start: int,
           pad: int, device: Any) -> BlockCalls:
    """The :class:`BlockCalls` of prompt + answer rows from layer ``start``."""
    batch, select, row = answer_rows(prompts, answers, pad, device)
    return BlockCalls(calls=block_inputs(model, adapter, batch, start), start=start, select=select, row=row,
                      n_rows=len(prompts))


def rerun(model: Any, adapter: Any, cache: BlockCalls, keep: Sequence[int] = ()) -> tuple[torch.Tensor, dict]:
    """(log p at the selected positions (N, vocab) float32, {layer: the state after it at the selected
    positions (N, d)} for ``keep``): blocks ``cache.start``… re-run from the cache as the model is now
    (differentiable through any hook on them), then the final norm and the head."""
    base = model.base_model
    h = None
    states = {}
    for k, (name, args, kwargs) in enumerate(cache.calls, start=cache.start):
        if h is not None:
            args, kwargs = ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})
        out = base.get_submodule(name)(*args, **kwargs)
        h = out[0] if isinstance(out, (tuple, list)) else out
        if k in keep:
            states[k] = h[cache.select]
    norm = adapter.final_norm(base)
    if norm is not None:
        h = norm(h)
    return torch.log_softmax(model.get_output_embeddings()(h[cache.select]).float(), -1), states


__all__ = ["BlockCalls", "answer_rows", "block_inputs", "cached", "rerun"]
