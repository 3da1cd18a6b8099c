"""Activation addition (docs/math.md §5d), at run time and as weights.

At run time (what steering-vectors, repeng and llama.cpp control vectors do): after execution
layer ℓ, every position's residual state h_t ← h_t + c·v::

    with sf.activation_steering(model, v, layers=[12, 15], coeff=4.0):
        model.generate(...)

``v`` is used as given (not normalized; a ``{layer: v}`` mapping or a ``Direction`` gives one
vector per layer); ``positions="skip-first"`` leaves position 0 alone (a chat template's first
token, where Llama-style models park a massive activation: adding there moves every later token).

As weights: the MLP output projection of block ℓ writes last into the residual stream after
block ℓ (pre-norm blocks), so a constant addition c·v there is

* exact: a bias change b' = b + c·v, where that writer has a bias (GPT-2, Qwen2's MLP has none);
* approximate otherwise: the rank-1 edit W' = W + c‖v‖ (v/‖v‖) a with a fitted so that a·z_t ≈ 1
  on the writer's inputs z_t over probe prompts (ridge; and a·z ≈ 0 at position 0 for
  ``positions="skip-first"``). Its cost at inference is nothing: the same matrices, changed values.

``addition_edits`` plans those edits (values, :class:`~.edit.Edit`); ``addition_as_weights`` applies
them inside a ``with`` (bit-exact removal on exit). ``steer`` records them (the default edit of
causal LMs, ``steer.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Mapping, Sequence

import torch

from ..configs import check_positions, select_layers
from ..errors import InvalidArgumentError, bad_argument
from ..loading import open_source
from .common import model_object
from .sources import check_vector
from .edit import Edit
from ..prompts import PromptBatch
from .measure import encode, model_device, run_hooked



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
        chosen = select_layers(layers, n)
        if is_direction:
            raw = {k: vector.vector(k) for k in chosen}
        else:
            raw = {k: getattr(vector, "vector", vector) for k in chosen}
    out = {}
    for k, v in raw.items():
        unit = check_vector(v, d, name="vector", model_name=model_id)  # checks shape, finite, non-zero
        t = v.detach().cpu().to(torch.float64) if isinstance(v, torch.Tensor) else torch.as_tensor(v, dtype=torch.float64)
        out[k] = unit * torch.linalg.vector_norm(t.reshape(-1))
    return out


def check_coeff(coeff: Any) -> float:
    import math

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
            h = out[0] if isinstance(out, (tuple, list)) else out
            shift = (spec.coeff * v).to(device=h.device, dtype=h.dtype)
            if spec.positions == "skip-first" and where.ids is not None:
                keep = (where.ids.to(h.device) != 0).to(h.dtype)[..., None]
                h = h + keep * shift
            else:
                h = h + shift
            return (h, *out[1:]) if isinstance(out, (tuple, list)) else h
        return hook

    try:
        for layer, v in spec.vectors.items():
            block = base.get_submodule(adapter.layer_block(seq[layer]))
            handles.append(block.register_forward_hook(add(v)))
        yield spec
    finally:
        for h in handles:
            h.remove()


# ---- as weights ------------------------------------------------------------------------------------
def output_writer(adapter: Any, layer: int, model_id: str) -> Any:
    """The writer whose output is the last write into the residual stream after ``layer``: the MLP's
    output projection of a pre-norm block, with no norm of its own after it."""
    slot = adapter.layer_sequence()[layer]
    mlp = [w for w in adapter.block_writers(slot) if w.kind == "mlp"]
    why = None
    if adapter.residual == "post":
        why = "its blocks normalize after the residual addition (post-LN)"
    elif adapter.shares_weights:
        why = "it runs one block at several layers (shared weights)"
    elif not mlp:
        why = "it declares no MLP output writer"
    elif mlp[0].norm is not None:
        why = f"its MLP output goes through a norm ({mlp[0].norm}) before the residual"
    elif mlp[0].layout not in ("out_in", "in_out"):
        why = f"its MLP output is a {mlp[0].layout} weight"
    if why is not None:
        raise InvalidArgumentError(f"{model_id}: an addition after layer {layer} has no weight-space equal because "
                                   f"{why}. Use activation_steering (a run-time hook) instead.")
    return mlp[0]


@torch.no_grad()
def writer_inputs(model: Any, adapter: Any, layers: Sequence[int], batch: Any) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{layer: (z, first)}: the inputs of each layer's output writer at the real tokens of ``batch``
    (float64, CPU) and whether each is a sequence's first real token (one forward pass)."""
    base = model.base_model
    seq = adapter.layer_sequence()
    seen: dict[int, torch.Tensor] = {}
    handles = []
    for k in layers:
        w = output_writer(adapter, k, "the model")
        handles.append(base.get_submodule(w.module).register_forward_pre_hook(
            lambda m, a, k=k: seen.__setitem__(k, a[0].detach())))
    calls: list = []
    names = sorted({adapter.layer_block(s) for s in set(seq)})
    handles += [base.get_submodule(n).register_forward_hook(lambda m, a, o: calls.append(None)) for n in names]
    run_hooked(model, batch, handles, expected_calls=len(seq), calls=calls)
    mask = batch.attention_mask.bool().cpu()
    first = torch.zeros_like(mask)
    first[torch.arange(mask.shape[0]), mask.long().argmax(1)] = True
    return {k: (seen[k].cpu().to(torch.float64)[mask], first[mask]) for k in layers}


def fit_constant_row(z: torch.Tensor, first: torch.Tensor, *, positions: str = "skip-first", ridge: float = 0.1,
                     first_weight: float = 100.0) -> tuple[torch.Tensor, dict]:
    """a minimizing Σ_t w_t (a·z_t − y_t)² + ridge·(tr(ZᵀWZ)/n)·‖a‖²: y = 1, except y = 0 with
    weight ``first_weight`` at first positions when ``positions="skip-first"``. Returns a and the
    fit (mean and coefficient of variation of a·z on the kept positions, mean at the first ones)."""
    z = z.to(torch.float64)
    y = torch.ones(z.shape[0], dtype=torch.float64)
    w = torch.ones_like(y)
    if positions == "skip-first":
        y[first] = 0.0
        w[first] = first_weight
    G = (z * w[:, None]).T @ z
    lam = ridge * torch.trace(G) / G.shape[0]
    a = torch.linalg.solve(G + lam * torch.eye(G.shape[0], dtype=torch.float64), (z * w[:, None]).T @ y)
    s = z @ a
    kept = s[~first] if positions == "skip-first" else s
    fit = {"method": "fit a.z=1", "ridge": ridge, "positions": positions, "n_states": int(z.shape[0]),
           "fit_mean": float(kept.mean()), "fit_cv": float(kept.std() / kept.mean().abs().clamp_min(1e-300)),
           "first_mean": float(s[first].mean()) if bool(first.any()) else None}
    return a, fit


def addition_edits(model: Any, vectors: Mapping[int, torch.Tensor], coeff: float, *, positions: str = "skip-first",
                   prompts: Any = None, tokenizer: Any = None, inputs: Mapping[int, tuple] | None = None,
                   ridge: float = 0.1, exact_bias: bool = True, source: Any = None) -> list[Edit]:
    """The weight-space equal of adding ``coeff·v`` after each layer of ``vectors`` (values: nothing is
    changed): a bias edit where the layer's output writer has one (``positions="all"``, exact), else
    the rank-1 edit with a fitted on the writer's inputs over ``prompts`` (strings, or a
    ``PromptBatch`` such as chat-formatted rows; or the given ``inputs``, :func:`writer_inputs`).
    ``source``: ``model`` already opened (a steering call opens it once)."""
    source = source if source is not None else open_source(model)
    adapter = source.adapter
    positions = check_positions(positions)
    coeff = check_coeff(coeff)
    base = model.base_model
    seq = adapter.layer_sequence()
    writers = {k: output_writer(adapter, k, source.model_id) for k in vectors}
    need_fit = [k for k, w in writers.items() if not (exact_bias and w.bias and positions == "all")]
    if need_fit and inputs is None:
        batch = prompts.to(model_device(model)) if isinstance(prompts, PromptBatch) else \
            encode(model, prompts, tokenizer, name="prompts")
        inputs = writer_inputs(model, adapter, need_fit, batch)
    edits = []
    for k, v in sorted(vectors.items()):
        w = writers[k]
        v = v.to(torch.float64)
        norm = float(torch.linalg.vector_norm(v))
        u = v / norm
        stored = base.get_parameter(w.weight)
        width = stored.shape[0] if w.transposed else stored.shape[1]
        common = dict(module=w.weight, layer=k, slot=seq[k], u=u, kind="add", writer="mlp", w=None,
                      transposed=w.transposed)
        if k not in need_fit:  # y = Wz + b: b' = b + c·v is the addition itself
            edits.append(Edit(**common, a=torch.zeros(width, dtype=torch.float64), gain=0.0,
                              solve={"method": "bias", "exact": True}, bias_module=w.bias_name,
                              bias_delta=coeff * v))
            continue
        a, fit = fit_constant_row(*inputs[k], positions=positions, ridge=ridge)
        edits.append(Edit(**common, a=a, gain=coeff * norm, solve=fit))
    return edits


@contextlib.contextmanager
def addition_as_weights(model: Any, vector: Any, layers: Sequence[int] | int | None = None, coeff: float = 1.0,
                        positions: str = "skip-first", *, prompts: Any = None, tokenizer: Any = None,
                        ridge: float = 0.1, exact_bias: bool = True) -> Iterator[list[Edit]]:
    """``activation_steering``'s weight-space equal inside a ``with`` (same arguments, plus the probe
    ``prompts`` the row a is fitted on): the edits are applied on entry and removed bit for bit on exit."""
    model = model_object(model, "addition_as_weights")
    source = open_source(model)
    vectors = layer_vectors(vector, layers, source.adapter, source.model_id)
    edits = addition_edits(model, vectors, coeff, positions=positions, prompts=prompts, tokenizer=tokenizer,
                           ridge=ridge, exact_bias=exact_bias)
    with edits_applied(model, edits) as applied:
        yield applied


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
