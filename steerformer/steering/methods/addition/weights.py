"""Activation addition written as weights (docs/math.md §5d): the MLP output projection of block ℓ
writes last into the residual stream after block ℓ (pre-norm blocks), so a constant addition c·v
there is

* exact: a bias change b' = b + c·v, where that writer has a bias (GPT-2, Qwen2's MLP has none);
* approximate otherwise: the rank-1 edit W' = W + c‖v‖ (v/‖v‖) a with a fitted so that a·z_t ≈ 1
  on the writer's inputs z_t over probe prompts (ridge; and a·z ≈ 0 at position 0 for
  ``positions="skip-first"``). Its cost at inference is nothing: the same matrices, changed values.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import torch

from ....configs import check_positions
from ....errors import bad_argument
from ....loading import open_source
from ....prompts import PromptBatch
from ...activation import check_coeff, edits_applied, layer_vectors
from ...common import model_object
from ...edit import Edit
from ...measure import encode
from ...probe import capture, model_device


def writer_inputs(model: Any, adapter: Any, layers: Sequence[int], batch: Any) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{layer: (z, first)}: the inputs of each layer's output writer at the real tokens of ``batch``
    (float64, CPU) and whether each is a sequence's first real token (one forward pass)."""
    paths = {k: adapter.last_writer(k, "the model").module for k in layers}
    seen = capture(model, adapter, batch, modules={k: [p] for k, p in paths.items()}).modules
    mask = batch.attention_mask.bool().cpu()
    first = torch.zeros_like(mask)
    first[torch.arange(mask.shape[0]), mask.long().argmax(1)] = True
    return {k: (seen[(k, p)].cpu().to(torch.float64)[mask], first[mask]) for k, p in paths.items()}


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
    writers = {k: adapter.last_writer(k, source.model_id) for k in vectors}
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
        if not bool(inputs[k][0].any()):  # G = ZᵀWZ = 0: no row a has a·z = 1 (the solve would be singular)
            raise bad_argument("layers", k, f"layers whose {w.module} receives non-zero states (every state "
                               f"entering it in {source.model_id} is 0 on the probe prompts: the constant "
                               "addition cannot be written into its weights)",
                               "Check that the checkpoint's weights are not all zero (such a model cannot be "
                               "steered), or steer other layers.")
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


__all__ = ["addition_as_weights", "addition_edits", "fit_constant_row", "writer_inputs"]
