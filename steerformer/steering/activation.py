"""Activation addition (docs/math.md §5d) at run time, and edits applied for the length of a ``with``.

At run time (what steering-vectors, repeng and llama.cpp control vectors do): after execution
layer ℓ, every position's residual state h_t ← h_t + c·v::

    with sf.activation_steering(model, v, layers=[12, 15], coeff=4.0):
        model.generate(...)

``v`` is used as given (not normalized; a ``{layer: v}`` mapping or a ``Direction`` gives one
vector per layer); ``positions="skip-first"`` leaves position 0 alone (a chat template's first
token, where Llama-style models park a massive activation: adding there moves every later token).

As weights: the addition method's ``weights.py`` (``steering/methods/addition/``);
:func:`edits_applied` applies any edits inside a ``with`` (bit-exact removal on exit).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Iterator, Mapping, Sequence

import torch

from ..adapters.base import first_output
from ..configs import check_positions, select_layers
from ..errors import InvalidArgumentError, bad_argument
from ..loading import open_source
from .common import model_object
from .sources import check_vector
from .edit import Edit


def layer_vectors(vector: Any, layers: Sequence[int] | int | None, adapter: Any, model_id: str) -> dict[int, torch.Tensor]:
    """{execution layer: v (float64, as given)} from an array (the same at every layer of ``layers``),
    a ``{layer: array}`` mapping or a ``Direction`` (its vector at each layer)."""
    d, n = adapter.d_model, adapter.n_layers
    if isinstance(vector, Mapping):
        keys = select_layers(list(vector), n, name="vector (its layer keys)")
        if layers is not None and sorted(select_layers(layers, n)) != sorted(keys):
            raise bad_argument("layers", layers, f"the layers of the vector mapping {sorted(keys)} (or None)")
        raw = {k: vector[orig] for k, orig in zip(keys, vector)}
    else:
        is_direction = hasattr(vector, "vector") and callable(vector.vector)  # one vector per layer
        if layers is None and is_direction:
            layers = vector.layers  # a control vector steers the layers it holds, as llama.cpp and repeng do
        if layers is None:
            raise bad_argument("layers", None, "the layer(s) whose output gets c·v, e.g. layers=[12]",
                               f"The model has {n} layers; a middle one is the usual choice.")
        raw = {k: vector.vector(k) if is_direction else getattr(vector, "vector", vector)
               for k in select_layers(layers, n)}
    out = {}
    for k, v in raw.items():
        unit = check_vector(v, d, name="vector", model_name=model_id)  # checks shape, finite, non-zero
        t = v.detach().cpu().to(torch.float64) if isinstance(v, torch.Tensor) else torch.as_tensor(v, dtype=torch.float64)
        out[k] = unit * torch.linalg.vector_norm(t.reshape(-1))
    return out


def check_coeff(coeff: Any) -> float:
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or not math.isfinite(float(coeff)):
        raise bad_argument("coeff", coeff, "a finite number (negative steers away)")
    return float(coeff)


class _Positions:
    """The position index of every token of the current forward, read from the base model's inputs
    (position_ids, else the attention mask, else the cache length): generate() calls the model one
    token at a time, so "position 0" must come from the inputs, not from the tensor's column."""

    def __init__(self) -> None:
        self.ids: torch.Tensor | None = None

    def read(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        shape = (ids if ids is not None else embeds).shape[:2]
        pos = kwargs.get("position_ids")
        mask = kwargs.get("attention_mask")
        if pos is None and isinstance(mask, torch.Tensor) and mask.ndim == 2:
            pos = (mask.long().cumsum(-1) - 1)[:, -shape[1]:]
        if pos is None:
            cache = kwargs.get("past_key_values")
            past = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
            pos = torch.arange(past, past + shape[1]).expand(shape[0], -1)
        self.ids = pos


@dataclasses.dataclass
class ActivationSteering:
    """What an ``activation_steering`` block adds: c·v after each layer of ``vectors``."""

    vectors: dict[int, torch.Tensor]
    coeff: float
    positions: str

    @property
    def layers(self) -> list[int]:
        return sorted(self.vectors)

    def __repr__(self) -> str:
        norms = ", ".join(f"{k}: |v|={float(v.norm()):.4g}" for k, v in sorted(self.vectors.items()))
        return f"ActivationSteering(coeff={self.coeff:g}, positions={self.positions!r}, layers {{{norms}}})"


@contextlib.contextmanager
def activation_steering(model: Any, vector: Any, layers: Sequence[int] | int | None = None, coeff: float = 1.0,
                        positions: str = "all") -> Iterator[ActivationSteering]:
    """Inside the ``with``, every forward of ``model`` adds ``coeff·v`` to the residual stream after
    each execution layer of ``layers`` (at every position, or all but the first with
    ``positions="skip-first"``); the hooks are removed on exit, also on an exception. ``vector``: an
    array of d_model entries (used as given), a ``{layer: array}`` mapping or a ``Direction``."""
    model = model_object(model, "activation_steering")
    source = open_source(model)
    adapter = source.adapter
    spec = ActivationSteering(layer_vectors(vector, layers, adapter, source.model_id), check_coeff(coeff),
                              check_positions(positions))
    base = model.base_model
    seq = adapter.layer_sequence()
    if adapter.shares_weights:
        raise InvalidArgumentError(f"{source.model_id} runs one block at several layers (shared weights): a hook on "
                                   "that block cannot add at one layer only.")
    where = _Positions()
    handles = []
    if spec.positions == "skip-first":
        handles.append(base.register_forward_pre_hook(where.read, with_kwargs=True))

    def add(v: torch.Tensor):
        def hook(module, args, out):
            h = first_output(out)
            shift = (spec.coeff * v).to(device=h.device, dtype=h.dtype)
            if spec.positions == "skip-first" and where.ids is not None:  # position 0 keeps its state
                shift = (where.ids.to(h.device) != 0).to(h.dtype)[..., None] * shift
            h = h + shift
            return (h, *out[1:]) if isinstance(out, (tuple, list)) else h
        return hook

    try:
        for layer, v in spec.vectors.items():
            handles.append(base.get_submodule(adapter.layer_block(seq[layer])).register_forward_hook(add(v)))
        yield spec
    finally:
        for h in handles:
            h.remove()


# ---- as weights ------------------------------------------------------------------------------------
@contextlib.contextmanager
def edits_applied(model: Any, edits: Sequence[Edit]) -> Iterator[list[Edit]]:
    """Copies of ``edits`` (e.g. a record's, after ``unsteer``) applied inside the ``with`` and
    removed bit for bit on exit: to evaluate a recorded edit without re-planning it."""
    model = model_object(model, "edits_applied")
    fresh = [Edit.from_dict(e.to_dict()) for e in edits]
    applied = []
    try:
        for e in fresh:
            e.apply(model, check=False)
            applied.append(e)
        yield fresh
    finally:
        for e in reversed(applied):
            e.remove(model, check=False)
