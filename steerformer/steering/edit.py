"""``steer``: the rank-1 edit of one attention layer's output weight, in place; ``unsteer``: undo.

    W_O' = W_O + γ u (wᵀV⁺)            (MATH.md §5; algebra in ``algebra.py``)

Computed in float64 from the stored weights and cast back to the model's dtype. The original
stored tensor is kept on the model (``model._steerformer``) so ``unsteer`` is bit-identical.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any, Literal, Sequence

import numpy as np
import torch

from .. import __version__
from ..errors import InvalidArgumentError, SteerformerError, bad_argument
from ..loading import load_model, load_tokenizer, open_source
from ..matrices import read_attention_weights, select_layers
from . import algebra
from . import direction as dirs
from .measure import dynamics_probe, mean_abs_cos, model_probe
from .price import outputs, price
from .prompts import encode
from .record import SteeringRecord
from .spectrum import top_summary
from .strength import choose_gain
from .untie import retie, untie

log = logging.getLogger(__name__)

STATE_ATTR = "_steerformer"
SOLVES = ("exact", "min-norm")
MEASURES = ("dynamics", "model")


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of a tensor's stored bytes (dtype-exact: the identity used to verify an undo)."""
    t = t.detach().contiguous().cpu()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def _check_options(target_alignment, strength, gain, solve, measure) -> None:
    if solve not in SOLVES:
        raise bad_argument("solve", solve, f"one of {SOLVES}")
    if measure not in MEASURES:
        raise bad_argument("measure", measure, f"one of {MEASURES}")
    if strength is not None and gain is not None:
        raise bad_argument("gain", gain, "either strength= or gain=, not both")
    for name, v in (("strength", strength), ("gain", gain)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer))
                              or not math.isfinite(float(v)) or float(v) <= 0):
            raise bad_argument(name, v, "a finite number > 0", "Milder steering is a smaller positive value.")
    if strength is None and gain is None:
        t = target_alignment
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating)) or not 0 < float(t) < 1:
            raise bad_argument("target_alignment", t, "a number in (0, 1): the mean |cos| wanted")


def resolve_direction(model, source, layer, *, direction=None, token=None, eigvec=None, text=None, tokenizer=None):
    """(u, DirectionSource) from exactly one of the direction sources."""
    given = {k: v for k, v in (("direction", direction), ("token", token), ("eigvec", eigvec), ("text", text)) if v is not None}
    if len(given) != 1:
        raise bad_argument("direction", sorted(given) or None,
                           "exactly one source: direction= (array or .npy path), token=, eigvec= or text=")
    d, name = source.adapter.d_model, source.model_id
    if direction is not None:
        if isinstance(getattr(direction, "direction_source", None), dirs.DirectionSource):  # e.g. contrastive
            return dirs.check_vector(direction.vector, d, model_name=name), direction.direction_source
        if isinstance(direction, (str, bytes)) or hasattr(direction, "__fspath__"):
            path = str(direction)
            return dirs.load_npy(path, d, model_name=name), dirs.DirectionSource("npy", {"path": path})
        return dirs.check_vector(direction, d, model_name=name), dirs.DirectionSource("array", {})
    if token is not None:
        u, info = dirs.token_direction(model, tokenizer, token, d)
        return u, dirs.DirectionSource("token", info)
    if eigvec is not None:
        w = read_attention_weights(source, [layer], parts=("vo",))[layer]
        u, info = dirs.eigvec_direction(w.layer_matrix(), eigvec)
        return u, dirs.DirectionSource("eigvec", {**info, "layer": layer})
    u, info = dirs.text_direction(model, tokenizer, text, d)
    return u, dirs.DirectionSource("text", info)


def steer(
    model: Any,
    direction: Any = None,
    *,
    token: str | None = None,
    eigvec: int | None = None,
    text: str | None = None,
    target_alignment: float = 0.99,
    strength: float | None = None,
    gain: float | None = None,
    left: Any = None,
    layer: int = -1,
    solve: Literal["exact", "min-norm"] = "min-norm",
    measure: Literal["dynamics", "model"] = "model",
    through_ffn: bool = False,
    untie_last: bool = False,
    prompts: Sequence[str] | torch.Tensor | None = None,
    heldout_prompts: Sequence[str] | torch.Tensor | None = None,
    tokenizer: Any = None,
    dynamics_prompts: int = 30,
    dynamics_tokens: int = 10,
    seed: int = 0,
    report: bool = True,
) -> SteeringRecord:
    """Steer ``model`` (edited in place) toward a direction; returns the :class:`SteeringRecord`.

    Direction: ``direction`` (array/tensor or ``.npy`` path), ``token`` (the unembedding row for
    models with an LM head, else the input embedding row), ``eigvec`` (index of an eigenvector of
    F_layer, by real part) or ``text`` (mean final hidden state). ``left``: w (default u).

    Gain γ: ``gain`` (absolute), ``strength`` (γ = strength·|λ1(F_layer)|), or else the smallest
    gain reaching ``target_alignment`` in ``measure`` ("model": mean |cos(h, u)| of the real
    model's final states on ``prompts``; "dynamics": ρ(x(L+1), u) in the controlled dynamics);
    an unreachable target stops at the best and says so in ``record.message``.

    ``solve``: "exact" (a = wᵀV⁻¹, least squares when V is singular) or "min-norm" (ridge fit of a
    on the states entering the layer, α chosen on held-out prompts). ``through_ffn``: solve for the
    pre-FFN direction so the final states (FFN and norms included) align with u.
    ``untie_last`` (ALBERT): give the last layer its own weight group first.
    ``report=False`` skips the measurements not needed to make the edit (fast path).
    """
    _check_options(target_alignment, strength, gain, solve, measure)
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        raise bad_argument("model", model, "a model object (steer edits it in place)",
                           "Load it first: model = steerformer.steering.load_for_steering(path).")
    model = load_model(model)
    state = getattr(model, STATE_ATTR, None)
    source = open_source(model)
    adapter = source.adapter
    untied_info = None
    if untie_last:
        if adapter.model_type != "albert":
            raise bad_argument("untie_last", True, "an ALBERT model (only ALBERT shares layer weights)")
        if state is not None:
            raise InvalidArgumentError("untie_last=True on a model that is already steered: unsteer it first.")
        untied_info = untie(model)
        source = open_source(model)
        adapter = source.adapter
    L = select_layers(layer, adapter.n_layers, name="layer")[0]
    seq = adapter.layer_sequence()
    slot = seq[L]
    tokenizer = load_tokenizer(model, tokenizer)
    try:
        u_target, dsource = resolve_direction(model, source, L, direction=direction, token=token, eigvec=eigvec,
                                              text=text, tokenizer=tokenizer)
        w = u_target if left is None else dirs.check_vector(left, adapter.d_model, name="left", model_name=source.model_id)
        record = _steer(model, source, L, slot, u_target, dsource, w, target_alignment=target_alignment,
                        strength=strength, gain=gain, solve=solve, measure=measure, through_ffn=through_ffn,
                        prompts=prompts, heldout_prompts=heldout_prompts, tokenizer=tokenizer,
                        dynamics_prompts=dynamics_prompts, dynamics_tokens=dynamics_tokens, seed=seed,
                        report=report, untied_info=untied_info)
    except BaseException:
        if untied_info is not None and getattr(model, STATE_ATTR, None) is None:
            retie(model, untied_info)
        raise
    return record


def _steer(model, source, L, slot, u_target, dsource, w, *, target_alignment, strength, gain, solve, measure,
           through_ffn, prompts, heldout_prompts, tokenizer, dynamics_prompts, dynamics_tokens, seed, report,
           untied_info) -> SteeringRecord:
    adapter = source.adapter
    seq = adapter.layer_sequence()
    base = model.base_model
    name = adapter.output_weight_name(slot)
    param = base.get_parameter(name)
    weights = read_attention_weights(source, [L], parts=("vo",))[L]  # float64 copies
    V, W_O = weights.value_matrix(), weights.output_matrix()
    searching = strength is None and gain is None
    need_model = report or solve == "min-norm" or through_ffn or (searching and measure == "model")
    ref = probe = None
    if need_model:
        ref = encode(model, prompts, tokenizer, name="prompts")
        probe = model_probe(model, adapter, L, ref)
    if through_ffn and probe is None:
        raise bad_argument("through_ffn", True, "reference prompts")

    # a = wᵀV⁺
    if solve == "exact":
        row = algebra.exact_row(V, w)
        if row.method == "lstsq":
            log.warning("V of layer %d is singular (cond %.3g): a = wᵀV⁺ by least squares", L, row.cond)
    else:
        fit, held = probe.split_inputs()
        row = algebra.ridge_row(V, w, fit, held)

    def stored(u: torch.Tensor, g: float | torch.Tensor) -> torch.Tensor:
        return adapter.output_weight_to_stored(W_O + g * torch.outer(u, row.a)).to(param.dtype)

    spec_before = top_summary(weights.layer_matrix()) if (report or strength is not None or searching) else None
    abs_l1 = spec_before["abs_lambda1"] if spec_before else None
    u = u_target
    dyn = dynamics_probe(source, L, prompts=dynamics_prompts, n_tokens=dynamics_tokens, seed=seed) \
        if (report or (searching and measure == "dynamics")) else None

    def curve_for(u_: torch.Tensor):
        if measure == "dynamics":
            return lambda g: dyn.alignment(g * torch.outer(u_, row.a), u_)
        return lambda g: probe.alignment(u_target, {name: stored(u_, g)})

    choice = None
    ffn_info = None
    if gain is not None:
        g = float(gain)
    elif strength is not None:
        g = float(strength) * abs_l1
    else:
        choice = choose_gain(curve_for(u), float(target_alignment), scale=abs_l1)
        g = choice.gain
    if through_ffn:
        from .ffn import compensate

        before_ffn = probe.alignment(u_target, {name: stored(u_target, g)})
        u, history = compensate(probe, u_target, lambda v: {name: stored(v, g)})
        if searching:
            choice = choose_gain(curve_for(u), float(target_alignment), scale=abs_l1)
            g = choice.gain
        ffn_info = {"alignment_without": before_ffn, "alignment_with_at_same_gain": history and max(history),
                    "steps": len(history), "gain_used_for_solve": g}

    # Measurements before the edit (held-out prompts).
    held = probe_h = out_before = None
    if report:
        held = encode(model, heldout_prompts, tokenizer, held_out=True, name="heldout_prompts")
        probe_h = model_probe(model, adapter, L, held)
        out_before = outputs(model, held)

    # The edit.
    state = getattr(model, STATE_ATTR, None)
    if state is None:
        state = {"originals": {}, "records": [], "untie": untied_info}
        setattr(model, STATE_ATTR, state)
    original = param.detach().clone()
    state["originals"].setdefault(name, original)
    new = stored(u, g)
    with torch.no_grad():
        param.copy_(new)
    delta_norm = float(torch.linalg.norm(new.double() - original.double()) / torch.linalg.norm(original.double()).clamp_min(1e-300))

    rec_kw: dict = {}
    if report:
        rec_kw["alignment_dynamics_before"] = dyn.alignment(torch.zeros_like(W_O), u)
        rec_kw["alignment_dynamics_after"] = dyn.alignment(g * torch.outer(u, row.a), u)
        rec_kw["alignment_model_before"] = float(mean_abs_cos(probe_h.final_before, u_target, probe_h.mask))
        rec_kw["alignment_model_after"] = probe_h.alignment(u_target)
        rec_kw.update(price(out_before, outputs(model, held)))
        W_new = adapter.output_weight_from_stored(new.to(torch.float64))
        rec_kw["spectrum_after"] = top_summary(W_new @ V)
    record = SteeringRecord(
        model_id=source.model_id, model_commit=source.commit, model_type=adapter.model_type, layer=L, slot=slot,
        module=name, layers_changed=[k for k, s in enumerate(seq) if s == slot], untied=untied_info is not None,
        dtype=str(param.dtype).replace("torch.", ""),
        direction=u.tolist(), direction_sha256=dirs.vector_hash(u), direction_source=dsource.to_dict(),
        target=u_target.tolist(), left=w.tolist(), left_sha256=dirs.vector_hash(w),
        gain=g, strength=(g / abs_l1) if abs_l1 else None, solve=row.to_dict(),
        measure=measure if choice is not None else None,
        target_alignment=float(target_alignment) if choice is not None else None,
        target_reached=choice.reached if choice is not None else None,
        message=choice.message if choice is not None else "",
        curve=[list(p) for p in choice.curve] if choice is not None else [],
        alignment_dynamics_before=rec_kw.get("alignment_dynamics_before"),
        alignment_dynamics_after=rec_kw.get("alignment_dynamics_after"),
        alignment_model_before=rec_kw.get("alignment_model_before"),
        alignment_model_after=rec_kw.get("alignment_model_after"),
        weight_change=delta_norm, spectrum_before=spec_before, spectrum_after=rec_kw.get("spectrum_after"),
        kl=rec_kw.get("kl"), kl_kind=rec_kw.get("kl_kind"), state_cosine=rec_kw.get("state_cosine"),
        through_ffn=ffn_info, original_sha256=tensor_sha256(state["originals"][name]),
        steered_sha256=tensor_sha256(new), steerformer_version=__version__,
        heldout_prompts=None if heldout_prompts is None or isinstance(heldout_prompts, torch.Tensor)
        else [str(p) for p in heldout_prompts],
        custom_heldout_ids=isinstance(heldout_prompts, torch.Tensor),
    )
    state["records"].append(record)
    if choice is not None and not choice.reached:
        log.warning("%s", choice.message)
    return record


def is_steered(model: Any) -> bool:
    return getattr(model, STATE_ATTR, None) is not None


def steering_records(model: Any) -> list[SteeringRecord]:
    state = getattr(model, STATE_ATTR, None)
    return [] if state is None else list(state["records"])


def unsteer(model: Any) -> Any:
    """Restore the original stored weights bit for bit (and ALBERT's shared groups); returns model."""
    state = getattr(model, STATE_ATTR, None)
    if state is None:
        raise SteerformerError(f"{type(model).__name__} has not been steered by steerformer in this session "
                               "(for a saved checkpoint use steerformer.steering.unsteer_checkpoint(dir)).")
    base = model.base_model
    with torch.no_grad():
        for name, original in state["originals"].items():
            base.get_parameter(name).copy_(original)
    if state.get("untie"):
        retie(model, state["untie"])
    delattr(model, STATE_ATTR)
    return model
