"""Per-layer weights and layer matrices F_k = W_O(k)·V(k) (docs/math.md §1), lazily or from memory."""

from __future__ import annotations

import collections
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .adapters.base import AttentionWeights, Part
from .configs import select_layers  # noqa: F401  (select_layers re-exported)
from .loading import ModelSource, as_source


@dataclasses.dataclass
class LayerMatrices:
    """Layer matrices of the selected execution layers.

    ``matrices[i]`` is F of execution layer ``layer_ids[i]``, which runs weight slot ``slot_ids[i]``
    (ALBERT layers that share weights have the same slot).
    """

    #: (n, d, d); None when made with ``form=False`` and every layer is factored (F = A @ B of
    #: ``factors``, never formed: :meth:`formed` forms it)
    matrices: torch.Tensor | None
    biases: torch.Tensor  # (n, d): W_O b_V + b_O, added to every token
    layer_ids: list[int]
    slot_ids: list[int]
    model_type: str
    d_model: int
    n_heads: int
    n_layers: int  # of the model, not of this selection
    source: dict
    #: per entry (A, B) with F = A @ B when r = H_kv·d_h < d (grouped-query / low-rank layers), else
    #: None; spectra() then solves the r × r problem (docs/math.md §1b). None when no layer is low-rank.
    factors: list[tuple[torch.Tensor, torch.Tensor] | None] | None = None

    def __len__(self) -> int:
        return len(self.layer_ids)

    def formed(self) -> torch.Tensor:
        """The (n, d, d) stack of F, formed from the factors when it was not (``form=False``)."""
        return self.matrices if self.matrices is not None else torch.stack([A @ B for A, B in self.factors])

    def distinct(self) -> tuple[torch.Tensor, list[int]]:
        """(matrices of the distinct slots in first-seen order, index into it for each layer)."""
        order = list(dict.fromkeys(self.slot_ids))
        first = [self.slot_ids.index(s) for s in order]
        return self.formed()[first], [order.index(s) for s in self.slot_ids]

    def numpy(self) -> np.ndarray:
        return self.formed().cpu().numpy()


def _read_attention(source: ModelSource, k: int, slot: int, get, parts: Sequence[Part], *,
                    store: bool = True) -> AttentionWeights:
    """The adapter's read of execution layer ``k``, memoized on a checkpoint-backed source per
    (slot, parts): an entry read with more parts serves a request for fewer. ``store=False`` reads
    through the cache without filling it (the streaming ``layer_matrices`` keeps its one-layer peak)."""
    if source.model is not None and not source.memoize_model:  # views an edit may change in place
        return source.adapter.read_attention(k, get, parts)
    want = frozenset(parts)
    for (s, have), w in source.attention_cache.items():
        if s == slot and want <= have:
            return w
    w = source.adapter.read_attention(k, get, parts)
    if store:
        source.attention_cache[(slot, want)] = w
    return w


def read_attention_weights(source: ModelSource, layers: Sequence[int] | None = None, *,
                           parts: Sequence[Part] = ("qk", "vo"), dtype: torch.dtype = torch.float64,
                           device: str | torch.device | None = None) -> dict[int, AttentionWeights]:
    """Canonical weights of each selected execution layer, read once per distinct slot."""
    adapter = source.adapter
    ids = select_layers(layers, adapter.n_layers)
    seq = adapter.layer_sequence()
    by_slot: dict[int, AttentionWeights] = {}
    out: dict[int, AttentionWeights] = {}
    with source.tensors() as get:
        for k in ids:
            slot = seq[k]
            if slot not in by_slot:
                by_slot[slot] = _read_attention(source, k, slot, get, parts).to(dtype=dtype, device=device)
            w = by_slot[slot]
            # Shared weights, but the mask/scale belong to the execution layer.
            out[k] = w if (w.mask, w.scale) == (adapter.mask(k), adapter.scale(k)) else \
                dataclasses.replace(w, mask=adapter.mask(k), scale=adapter.scale(k))
    return out


#: Layers read ahead in threads by :func:`layer_matrices` from a checkpoint: positioned reads and
#: the conversions run without the GIL, so reading overlaps the arithmetic of the layers before.
READ_AHEAD = 4


def _in_order(fn: Any, items: list, *, threaded: bool) -> Iterator:
    """``fn(item)`` for each item, yielded in order; with ``threaded``, up to :data:`READ_AHEAD`
    items are worked on at once (the peak holds that many layers, not all of them)."""
    if not threaded or len(items) < 2:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=READ_AHEAD) as pool:
        pending: collections.deque = collections.deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= READ_AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def layer_matrices(model: Any, layers: Sequence[int] | int | None = None, *, revision: str | None = None,
                   dtype: torch.dtype = torch.float64, device: str | torch.device | None = None,
                   form: bool = True) -> LayerMatrices:
    """F_k = W_O(k)·V(k) for each selected layer of a model object, local checkpoint or Hub id.

    From a checkpoint directory only the value and output tensors are read from the safetensors
    files (the model is never built), a few layers at a time in threads; from a model in memory
    its parameters are used as they are. Grouped-query layers (r = H_kv·d_h < d) also carry their
    factors (A, B); ``form=False`` keeps only those when every layer has them (``matrices`` is
    None then: what the factored spectra need, without the d × d stack — 43 GB in float64 for a
    Llama-3-70B shape).
    """
    source = as_source(model, revision=revision)
    adapter = source.adapter
    ids = select_layers(layers, adapter.n_layers)
    seq = adapter.layer_sequence()
    d = adapter.d_model
    low_rank = adapter.n_kv_heads * adapter.head_dim < d
    mats = None if (low_rank and not form) else torch.empty((len(ids), d, d), dtype=dtype, device=device)
    biases = torch.empty((len(ids), d), dtype=dtype, device=device)
    factors: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(ids)
    first = {seq[k]: i for i, k in reversed(list(enumerate(ids)))}  # each slot's first selected layer
    distinct = [(i, k) for i, k in enumerate(ids) if first[seq[k]] == i]
    with source.tensors() as get:
        def read(k: int) -> tuple[Any, tuple[torch.Tensor, torch.Tensor] | None]:
            """One slot's weights, and for a low-rank layer its factors in ``dtype`` (a reading
            thread's work: the stored W_O is never copied whole; the device is the caller's)."""
            w = _read_attention(source, k, seq[k], get, ("vo",), store=False)
            return w, (w.layer_factors(dtype=dtype) if low_rank else None)

        for i, (w, AB) in zip((i for i, _ in distinct), _in_order(read, [k for _, k in distinct],
                                                                  threaded=source.model is None)):
            if AB is None:
                w = w.to(dtype=dtype, device=device)
                mats[i], biases[i] = w.layer_matrix(), w.output_bias()
                continue
            A, B = (t.to(device) for t in AB)
            biases[i] = 0
            if w.b_V is not None:  # W_O b_V through A: column block g of A meets b_V of KV head g
                biases[i] += A @ w.b_V.reshape(-1).to(dtype=dtype, device=device)
            if w.b_O is not None:
                biases[i] += w.b_O.to(dtype=dtype, device=device)
            factors[i] = (A, B)  # low rank: the factors give the exact r × r spectrum
            if mats is not None:
                torch.matmul(A, B, out=mats[i])  # straight into the result: no d × d temporary
    for i, k in enumerate(ids):  # shared weights (ALBERT): the same F as the slot's first layer
        j = first[seq[k]]
        if j != i:
            biases[i], factors[i] = biases[j], factors[j]
            if mats is not None:
                mats[i] = mats[j]
    return LayerMatrices(
        matrices=mats, biases=biases, layer_ids=ids, slot_ids=[seq[k] for k in ids],
        model_type=adapter.model_type, d_model=adapter.d_model, n_heads=adapter.n_heads,
        n_layers=adapter.n_layers, source=source.meta(),
        factors=factors if any(f is not None for f in factors) else None,
    )
