"""Direction ablation ("abliteration", MATH.md §5b): the selected layers stop writing along u.

    W_O' = (I − s·u uᵀ) W_O          (unit u, 0 < s ≤ 1; default every layer, s = 1)

on each selected layer's output weight — the rank-1 edit γ = −s, a = uᵀW_O, so F' = (I − s uuᵀ) F —
as one :class:`~steerformer.steering.edits.Edit` per edited weight, all in one record: undone
bit for bit by ``unsteer``, saved, verified and exported as a LoRA adapter like any other edit.

What is removed is the token-dependent write W_O z (which carries the value bias b_V too); the
output bias b_O, a constant added to every token, is left as it is: changing it would not be a
rank-1 change of W_O, and a LoRA adapter could not carry it. With s = 1 the attention output of
an ablated layer minus b_O is orthogonal to u for every input.

A weight shared by several layers (ALBERT) is edited once; every layer running it is ablated.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numpy as np
import torch

from .. import __version__
from ..errors import bad_argument
from ..loading import load_model, load_tokenizer, open_source
from ..matrices import read_attention_weights, select_layers
from . import direction as dirs
from .edits import STATE_ATTR, Edit, Steering, steering_of, tensor_sha256
from .record import SteeringRecord

log = logging.getLogger(__name__)


def ablate(
    model: Any,
    direction: Any = None,
    *,
    token: str | None = None,
    eigvec: int | None = None,
    text: str | None = None,
    layers: Sequence[int] | int | None = None,
    scale: float = 1.0,
    tokenizer: Any = None,
    heldout_prompts: Sequence[str] | torch.Tensor | None = None,
    report: bool = True,
) -> SteeringRecord:
    """Remove the direction u from the attention write of every layer in ``layers`` (default all),
    W_O' = (I − scale·uuᵀ) W_O, in place; returns the record (one record, one edit per weight).
    Direction sources as for ``steer`` (``eigvec`` refers to the last selected layer's F).
    ``report``: measure the mean |cos(h, u)| of the final states and the KL on held-out prompts."""
    from .edit import _check_finite_outputs, _check_finite_record, _check_finite_weights, _check_not_offloaded, \
        _stores_transposed, resolve_direction
    from .measure import mean_abs_cos, model_probe
    from .price import outputs, price
    from .prompts import encode

    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not math.isfinite(float(scale)) \
            or not 0 < float(scale) <= 1:
        raise bad_argument("scale", scale, "a number in (0, 1]: 1 removes u entirely, less removes part of it")
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        raise bad_argument("model", model, "a model object (ablate edits it in place)",
                           "Load it first: model = steerformer.steering.load_for_steering(path).")
    model = load_model(model)
    source = open_source(model)
    adapter = source.adapter
    steering = steering_of(model)
    if steering is not None and steering.untie:
        raise bad_argument("model", type(model).__name__, "a model without untied layers for ablation",
                           "Unsteer it first.")
    selected = select_layers(layers, adapter.n_layers, name="layers")  # refuses duplicates itself
    seq = adapter.layer_sequence()
    by_slot: dict[int, int] = {}
    for L in selected:
        by_slot.setdefault(seq[L], L)  # a shared weight is edited once
    for slot, L in by_slot.items():
        _check_not_offloaded(model, adapter, L, slot)
    tokenizer = load_tokenizer(model, tokenizer)
    u, dsource = resolve_direction(model, source, selected[-1], direction=direction, token=token, eigvec=eigvec,
                                   text=text, tokenizer=tokenizer)
    s = float(scale)
    transposed = _stores_transposed(adapter)
    base = model.base_model
    edits = []
    for slot, L in sorted(by_slot.items(), key=lambda kv: kv[1]):
        weights = read_attention_weights(source, [L], parts=("vo",))[L]  # float64 copies
        W_O, V = weights.output_matrix(), weights.value_matrix()
        a = u @ W_O  # a = uᵀW_O: ΔW_O = −s u uᵀW_O
        b_V = weights.value_bias_heads()  # per query head, like a (grouped-query layers repeat b_V)
        edits.append(Edit(module=adapter.output_weight_name(slot), layer=L, slot=slot, u=u.clone(), a=a, gain=-s,
                          kind="ablate", solve={"method": "ablate", "cond_V": None, "alpha": None, "fit_error": None},
                          w=None, w_eff=V.T @ a,
                          bias_coef=None if b_V is None else float(a @ b_V.to(torch.float64)),
                          transposed=transposed))

    held = probe = out_before = None
    if report:
        held = encode(model, heldout_prompts, tokenizer, held_out=True, name="heldout_prompts")
        probe = model_probe(model, adapter, min(by_slot.values()), held)
        out_before = outputs(model, held, tokenizer)

    if steering is None:
        steering = Steering()
    steering._remember_originals(model, edits)
    applied: list[Edit] = []
    try:
        for e in edits:
            e.apply(model, check=False)
            applied.append(e)
            _check_finite_weights(e, model)
        num = sum(float(torch.linalg.norm(base.get_parameter(e.module).detach().double()
                                          - e._before.double().to(base.get_parameter(e.module).device)) ** 2)
                  for e in edits)
        den = sum(float(torch.linalg.norm(e._before.double()) ** 2) for e in edits)
        rec_kw: dict = {}
        if report:
            rec_kw["alignment_model_before"] = float(mean_abs_cos(probe.final_before, u, probe.mask))
            rec_kw["alignment_model_after"] = probe.alignment(u)
            out_after = outputs(model, held, tokenizer)
            _check_finite_outputs(out_after, edits[0])
            rec_kw.update(price(out_before, out_after))
        first = edits[0]
        record = SteeringRecord(
            model_id=source.model_id, model_commit=source.commit, model_type=adapter.model_type,
            layer=first.layer, slot=first.slot, module=first.module,
            layers_changed=[k for k, sl in enumerate(seq) if sl in by_slot], untied=False, dtype=first.dtype,
            direction=u.tolist(), direction_sha256=dirs.vector_hash(u), direction_source=dsource.to_dict(),
            target=u.tolist(), left=u.tolist(), left_sha256=dirs.vector_hash(u),
            gain=-s, strength=None, solve=dict(first.solve),
            measure=None, target_alignment=None, target_reached=None,
            message=f"ablation of u from {len(edits)} layer(s) (scale {s:g})", curve=[],
            alignment_dynamics_before=None, alignment_dynamics_after=None,
            alignment_model_before=rec_kw.get("alignment_model_before"),
            alignment_model_after=rec_kw.get("alignment_model_after"),
            weight_change=math.sqrt(num / den) if den > 0 else 0.0, spectrum_before=None, spectrum_after=None,
            kl=rec_kw.get("kl"), kl_kind=rec_kw.get("kl_kind"), state_cosine=rec_kw.get("state_cosine"),
            through_ffn=None, original_sha256=tensor_sha256(steering.originals[first.module]),
            steered_sha256=first.after_sha256, steerformer_version=__version__,
            heldout_prompts=None if heldout_prompts is None or isinstance(heldout_prompts, torch.Tensor)
            else [str(p) for p in heldout_prompts],
            custom_heldout_ids=isinstance(heldout_prompts, torch.Tensor),
            edits=edits,
        )
        _check_finite_record(record)
    except BaseException:
        for e in reversed(applied):
            e.remove(model, check=False)
        steering._forget_unused()
        raise
    from ..configs import SteerConfig

    record.config = SteerConfig(mode="ablate", scale=scale, report=report).to_dict()  # as steer() records it
    steering.push(model, record)  # the edits are applied: push only appends
    setattr(model, STATE_ATTR, steering)
    return record
