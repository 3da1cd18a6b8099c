"""``steer``: the rank-1 edit of one attention layer's output weight, in place; ``unsteer``: undo.

    W_O' = W_O + γ u (wᵀV⁺)            (MATH.md §5; algebra in ``algebra.py``)

Computed in float64 from the stored weights and cast back to the model's dtype. The edit is an
:class:`~steerformer.steering.edits.Edit` held, with the true original stored tensors, by the model's
:class:`~steerformer.steering.edits.Steering` (``edits.py``), so ``unsteer`` is bit-identical.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Iterator, Sequence

import torch

from .. import __version__
from ..configs import MEASURES, SOLVES, SteerConfig, renamed, with_options  # noqa: F401  (re-exported)
from ..errors import InvalidArgumentError, SteerformerError, bad_argument
from ..loading import load_model, load_tokenizer, open_source
from ..matrices import read_attention_weights, select_layers
from . import algebra
from . import direction as dirs
from .measure import dynamics_probe, mean_abs_cos, model_probe
from .price import outputs, price
from .prompts import encode
from .record import SteeringRecord
from .edits import STATE_ATTR, Edit, Steering, check_materialized, edited_stored, steering_of, tensor_sha256
from .spectrum import top_summary
from .strength import choose_gain
from .untie import retie, untie

log = logging.getLogger(__name__)



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
        w = read_attention_weights(source, [layer], parts=("vo",), device="cpu")[layer]
        u, info = dirs.eigvec_direction(None, eigvec, factors=w.layer_factors())  # numbered as analyze reports
        return u, dirs.DirectionSource("eigvec", {**info, "layer": layer})
    u, info = dirs.text_direction(model, tokenizer, text, d)
    return u, dirs.DirectionSource("text", info)


def steer(
    model: Any,
    direction: Any = None,
    config: SteerConfig | None = None,
    *,
    token: str | None = None,
    eigvec: int | None = None,
    text: str | None = None,
    left: Any = None,
    prompts: Sequence[str] | torch.Tensor | None = None,
    heldout_prompts: Sequence[str] | torch.Tensor | None = None,
    tokenizer: Any = None,
    layers: Sequence[int] | int | None = None,
    **options: Any,
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
    ``compensate_bias``: the edit also shifts every token's attention output by γ (a·b_V) u (the
    value bias goes through W_O); subtract that from the output bias b_O (recorded, undone with
    the edit). ``progress``: tqdm bars on stderr for the gain search and ``through_ffn``.

    A steered model steered again appends to its chain (``steering_of(model)``); ``unsteer`` undoes
    all of it, or the last k calls.

    A negative ``gain``/``strength`` steers away from u (F' = F − |γ| u wᵀ); the gain search only
    steers toward. ``mode="ablate"``: remove u from the write of every layer in ``layers`` (default
    all), W_O' = (I − scale·uuᵀ) W_O (see ``ablate.py``; gain/strength/solve do not apply).

    The options (``target_alignment=0.99, strength, gain, layer=-1, solve="min-norm",
    measure="model", through_ffn, untie_last, dynamics_n_prompts=30, dynamics_tokens=10, seed=0,
    report=True, compensate_bias, progress, mode="steer", scale=1.0``) come as a
    :class:`~steerformer.configs.SteerConfig` or as its fields by keyword; the record stores them
    (``record.config``).
    """
    options = renamed(options, SteerConfig.renamed, "steer")
    cfg = with_options(config, SteerConfig, options, "steer")
    record = _steer_call(model, direction, cfg, token=token, eigvec=eigvec, text=text, left=left, prompts=prompts,
                         heldout_prompts=heldout_prompts, tokenizer=tokenizer, layers=layers)
    record.config = cfg.to_dict()
    return record


def _steer_call(model, direction, cfg: SteerConfig, *, token, eigvec, text, left, prompts, heldout_prompts,
                tokenizer, layers) -> SteeringRecord:
    target_alignment, strength, gain, layer, solve = cfg.target_alignment, cfg.strength, cfg.gain, cfg.layer, cfg.solve
    measure, through_ffn, untie_last, mode, scale = cfg.measure, cfg.through_ffn, cfg.untie_last, cfg.mode, cfg.scale
    dynamics_prompts, dynamics_tokens, seed, report = cfg.dynamics_n_prompts, cfg.dynamics_tokens, cfg.seed, cfg.report
    compensate_bias, progress = cfg.compensate_bias, cfg.progress
    if mode == "ablate":
        from .ablate import ablate

        return ablate(model, direction, token=token, eigvec=eigvec, text=text, layers=layers, scale=scale,
                      tokenizer=tokenizer, heldout_prompts=heldout_prompts, report=report)
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        raise bad_argument("model", model, "a model object (steer edits it in place)",
                           "Load it first: model = steerformer.steering.load_for_steering(path).")
    model = load_model(model)
    state = steering_of(model)
    source = open_source(model)
    adapter = source.adapter
    untied_info = None
    if untie_last:
        if not adapter.can_untie:
            raise bad_argument("untie_last", True, "a model whose layers share weights (ALBERT)")
        if state is not None:
            raise InvalidArgumentError("untie_last=True on a model that is already steered: unsteer it first.")
        untied_info = untie(model)
        source = open_source(model)
        adapter = source.adapter
    L = select_layers(layer, adapter.n_layers, name="layer")[0]
    seq = adapter.layer_sequence()
    slot = seq[L]
    _check_not_offloaded(model, adapter, L, slot)
    tokenizer = load_tokenizer(model, tokenizer)
    try:
        with source.memoized():  # V/O read once per call (every read comes before the edit is applied)
            if report or (strength is None and gain is None and measure == "dynamics"):
                read_attention_weights(source, list(range(L + 1)))  # Q/K/V/O up to L: the dynamics probe's read
            u_target, dsource = resolve_direction(model, source, L, direction=direction, token=token, eigvec=eigvec,
                                                  text=text, tokenizer=tokenizer)
            w = u_target if left is None else dirs.check_vector(left, adapter.d_model, name="left", model_name=source.model_id)
            record = _steer(model, source, L, slot, u_target, dsource, w, target_alignment=target_alignment,
                            strength=strength, gain=gain, solve=solve, measure=measure, through_ffn=through_ffn,
                            prompts=prompts, heldout_prompts=heldout_prompts, tokenizer=tokenizer,
                            dynamics_prompts=dynamics_prompts, dynamics_tokens=dynamics_tokens, seed=seed,
                            report=report, untied_info=untied_info, compensate_bias=compensate_bias,
                            progress=progress)
    except BaseException:
        if untied_info is not None and getattr(model, STATE_ATTR, None) is None:
            retie(model, untied_info)
        raise
    return record


def _steer(model, source, L, slot, u_target, dsource, w, *, target_alignment, strength, gain, solve, measure,
           through_ffn, prompts, heldout_prompts, tokenizer, dynamics_prompts, dynamics_tokens, seed, report,
           untied_info, compensate_bias, progress=False) -> SteeringRecord:
    adapter = source.adapter
    seq = adapter.layer_sequence()
    base = model.base_model
    name = adapter.output_weight_name(slot)
    param = base.get_parameter(name)
    # float64 CPU copies: a = wᵀV⁺, spectra and reports run on the CPU; the edit itself is made on
    # the weight's device from u and a moved there once (edits.edited_stored)
    weights = read_attention_weights(source, [L], parts=("vo",), device="cpu")[L]
    V, W_O = weights.value_matrix(), weights.output_matrix()
    bias_name = name[: -len("weight")] + "bias" if name.endswith("weight") else None
    b_V = getattr(weights, "b_V", None)
    bias_coef = None  # a·b_V, set once a is known
    if compensate_bias and (b_V is None or bias_name is None or not _has_param(base, bias_name)):
        raise bad_argument("compensate_bias", True, "a layer with a value bias b_V and an output bias b_O",
                           f"Layer {L} of {source.model_id} has {'no value bias' if b_V is None else 'no output bias'}: "
                           "its edit shifts no bias, nothing to compensate.")
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

    transposed = _stores_transposed(adapter)
    if b_V is not None:  # a has one block per query head: b_V repeated like V (grouped-query layers)
        bias_coef = float(row.a.cpu() @ weights.value_bias_heads().to(torch.float64).cpu())

    def stored(u: torch.Tensor, g: float | torch.Tensor) -> torch.Tensor:
        return edited_stored(param, u, row.a, g, transposed=transposed)

    spec_before = top_summary(None, factors=weights.layer_factors()) if (report or strength is not None or searching) else None
    abs_l1 = spec_before["abs_lambda1"] if spec_before else None
    u = u_target
    dyn = dynamics_probe(source, L, n_prompts=dynamics_prompts, n_tokens=dynamics_tokens, seed=seed) \
        if (report or (searching and measure == "dynamics")) else None

    def curve_for(u_: torch.Tensor, desc: str = "gain search"):
        if measure == "dynamics":
            f = lambda g: dyn.alignment(algebra.delta_output(u_, row.a, g), u_)  # noqa: E731
        else:
            f = lambda g: probe.alignment(u_target, {name: stored(u_, g)})  # noqa: E731
        return _counted(f, desc, progress)

    choice = None
    ffn_info = None
    if gain is not None:
        g = float(gain)
    elif strength is not None:
        g = float(strength) * abs_l1
        if not g * float(row.a.abs().max()) < torch.finfo(param.dtype).max / 2:  # g·u·aᵀ itself overflows
            raise bad_argument("strength", strength, f"a strength whose edit is finite (gain = strength × "
                               f"|λ1| = {g:.3g} overflows the weights)", "Use a strength of at most ~1e5.")
    else:
        choice = _choose(curve_for(u), float(target_alignment), abs_l1)
        g = choice.gain
    if through_ffn:
        from .ffn import compensate

        before_ffn = probe.alignment(u_target, {name: stored(u_target, g)})
        with _bar("through-ffn", 60, progress) as bar:
            u, history = compensate(probe, u_target, lambda v: {name: stored(v, g)},
                                    on_step=lambda val: (bar.update(1), bar.set_postfix(alignment=f"{val:.3f}")))
        if searching:
            choice = _choose(curve_for(u, "gain search (after FFN)"), float(target_alignment), abs_l1)
            g = choice.gain
        ffn_info = {"alignment_without": before_ffn, "alignment_with_at_same_gain": history and max(history),
                    "steps": len(history), "gain_used_for_solve": g}

    # Measurements before the edit (held-out prompts).
    held = probe_h = out_before = None
    if report:
        held = encode(model, heldout_prompts, tokenizer, held_out=True, name="heldout_prompts")
        probe_h = model_probe(model, adapter, L, held)
        out_before = outputs(model, held, tokenizer)

    # The edit.
    steering = steering_of(model)
    if steering is None:
        steering = Steering(untie=untied_info)
    edit = Edit(module=name, layer=L, slot=slot, u=u.detach().cpu().clone(), a=row.a.detach().cpu().clone(), gain=g,
                kind="steer", solve=row.to_dict(), w=w.detach().cpu().clone(), w_eff=V.T @ row.a.cpu(),
                bias_coef=bias_coef, bias_module=bias_name if compensate_bias else None,
                compensate_bias=bool(compensate_bias), transposed=transposed)
    steering._remember_originals(model, [edit])  # the TRUE originals: kept from the first edit on
    original = steering.originals[name]
    try:
        edit.apply(model, check=False)
        new = param.detach()
        _check_finite_weights(edit, model)
        delta_norm = float(torch.linalg.norm(new.double() - original.double().to(new.device))
                           / torch.linalg.norm(original.double()).clamp_min(1e-300))
        rec_kw: dict = {}
        if report:
            rec_kw["alignment_dynamics_before"] = dyn.alignment(torch.zeros_like(W_O), u)
            rec_kw["alignment_dynamics_after"] = dyn.alignment(edit.delta(), u)
            rec_kw["alignment_model_before"] = float(mean_abs_cos(probe_h.final_before, u_target, probe_h.mask))
            rec_kw["alignment_model_after"] = probe_h.alignment(u_target)
            out_after = outputs(model, held, tokenizer)
            _check_finite_outputs(out_after, edit)
            rec_kw.update(price(out_before, out_after))
            W_new = adapter.output_weight_from_stored(new.to(torch.float64).cpu())
            rec_kw["spectrum_after"] = top_summary(None, factors=(W_new, V))
        w_eff = edit.w_eff
        cos_eff = float(w_eff @ w / (torch.linalg.vector_norm(w_eff) * torch.linalg.vector_norm(w)).clamp_min(1e-300))
        record = SteeringRecord(
            model_id=source.model_id, model_commit=source.commit, model_type=adapter.model_type, layer=L, slot=slot,
            module=name, layers_changed=[k for k, s in enumerate(seq) if s == slot], untied=steering.untie is not None,
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
            through_ffn=ffn_info, original_sha256=tensor_sha256(original),
            steered_sha256=edit.after_sha256, steerformer_version=__version__,
            heldout_prompts=None if heldout_prompts is None or isinstance(heldout_prompts, torch.Tensor)
            else [str(p) for p in heldout_prompts],
            custom_heldout_ids=isinstance(heldout_prompts, torch.Tensor),
            w_eff_cos=cos_eff,
            effective_strength=(abs(g) * abs(float(w_eff @ u)) / abs_l1) if abs_l1 else None,
            bias_shift_norm=edit.bias_shift_norm, compensate_bias=bool(compensate_bias), edits=[edit],
        )
        _check_finite_record(record)
    except BaseException:
        if edit.is_applied:
            edit.remove(model, check=False)
        steering._forget_unused()
        raise
    steering.push(model, record)  # the edit is applied: push only appends
    setattr(model, STATE_ATTR, steering)
    if choice is not None and not choice.reached:
        log.warning("%s", choice.message)
    return record


def _bar(desc: str, total: int | None, enabled: bool):
    """A tqdm bar on stderr (a silent one when not ``enabled``)."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="eval" if total is None else "step", file=sys.stderr,
                disable=not enabled, leave=False, dynamic_ncols=True)


class _counted:
    """A curve γ ↦ alignment that advances a progress bar per evaluation (closed when the search ends)."""

    def __init__(self, f, desc: str, enabled: bool) -> None:
        self.f, self.desc, self.enabled, self.bar = f, desc, enabled, None

    def __call__(self, g: float) -> float:
        if self.bar is None:
            self.bar = _bar(self.desc, None, self.enabled)
        val = self.f(g)
        self.bar.update(1)
        self.bar.set_postfix(gain=f"{float(g):.3g}", alignment=f"{val:.3f}")
        return val

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _choose(curve: _counted, target: float, scale: float):
    try:
        return choose_gain(curve, target, scale=scale)
    finally:
        curve.close()


def _has_param(base, name: str) -> bool:
    try:
        base.get_parameter(name)
        return True
    except AttributeError:
        return False


def _check_not_offloaded(model, adapter, L: int, slot: int) -> None:
    """Offloaded weights (device_map with disk/CPU offload) sit on the meta device: name the layer."""
    attn = adapter.slots()[slot]
    for n, p in model.base_model.get_submodule(attn).named_parameters():
        if p.device.type == "meta":
            check_materialized(model, f"{attn}.{n}", L)
    check_materialized(model, adapter.output_weight_name(slot), L)


def _stores_transposed(adapter) -> bool:
    """Whether the adapter stores W_Oᵀ (GPT-2 Conv1D): read from its own conversion, on a 2×3 probe."""
    return tuple(adapter.output_weight_to_stored(torch.zeros(2, 3, dtype=torch.float64)).shape) == (3, 2)


def _nonfinite(name: str, what: str) -> SteerformerError:
    return SteerformerError(f"the edit gives non-finite {what} ({name}): nothing was changed or saved. "
                            "Use a smaller gain/strength (or target alignment), or check the direction.")


def _check_finite_weights(edit: Edit, model) -> None:
    base = model.base_model
    for n in (edit.module, edit.bias_module if edit.compensate_bias else None):
        if n is not None and not bool(torch.isfinite(base.get_parameter(n)).all()):
            raise _nonfinite(f"gain {edit.gain:.6g}", f"weights in {n}")


def _check_finite_outputs(out, edit: Edit) -> None:
    # final states must be finite; log-probabilities may be -inf (a probability that underflowed), never NaN
    if not bool(torch.isfinite(out.states).all()) or (out.logp is not None and bool(torch.isnan(out.logp).any())):
        raise _nonfinite(f"gain {edit.gain:.6g}", "model outputs on the held-out prompts")


def _check_finite_record(record: SteeringRecord) -> None:
    names = ("gain", "strength", "weight_change", "alignment_dynamics_after", "alignment_model_after", "kl",
             "state_cosine", "w_eff_cos", "effective_strength", "bias_shift_norm")
    for n in names:
        v = getattr(record, n)
        if v is not None and not math.isfinite(float(v)):
            raise _nonfinite(f"record.{n} = {v}", "record values")
    for n in ("spectrum_after",):
        v = getattr(record, n)
        if v is not None and not all(math.isfinite(float(x)) for x in v["lambda1"]):
            raise _nonfinite(f"record.{n}", "record values")


def is_steered(model: Any) -> bool:
    """Whether ``model`` carries steering edits (made in this session or re-attached on load)."""
    return steering_of(model) is not None


def steering_records(model: Any) -> list[SteeringRecord]:
    """The records of the steering edits applied to ``model``, oldest first (empty when unsteered)."""
    s = steering_of(model)
    return [] if s is None else list(s.records)


def unsteer(model: Any, *, last: int | None = None) -> Any:
    """Undo steering bit for bit; returns ``model``. ``last=None``: every edit (the true original
    weights, and ALBERT's shared groups, come back); ``last=k``: only the last k ``steer`` calls."""
    steering = steering_of(model)
    if steering is None:
        raise SteerformerError(f"{type(model).__name__} has not been steered by steerformer "
                               "(for a saved checkpoint load it with steerformer.load_model(dir), or use "
                               "steerformer.steering.unsteer_checkpoint(dir)).")
    n = len(steering.records)
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or not 1 <= last):
        raise bad_argument("last", last, f"a whole number >= 1 (the model has {n} steering call(s))")
    if last is not None and last < n:
        steering.pop(model, last)
        return model
    base = model.base_model
    with torch.no_grad():
        for name, original in steering.originals.items():
            base.get_parameter(name).copy_(original)
    for e in steering.edits:
        e._before = e._bias_before = None
    if steering.untie:
        retie(model, steering.untie)
    delattr(model, STATE_ATTR)
    return model


@contextlib.contextmanager
def steered(model: Any, direction: Any = None, **kwargs: Any) -> Iterator[SteeringRecord]:
    """``with steered(model, direction, gain=…) as rec:`` — :func:`steer` on entry (same arguments),
    and on exit, also on an exception, the edit is removed bit for bit (with any edit made after it
    inside the block). Edits made before the block stay."""
    rec = steer(model, direction, **kwargs)
    try:
        yield rec
    finally:
        steering = steering_of(model)
        if steering is not None:
            index = next((i for i, r in enumerate(steering.records) if r is rec), None)
            if index is not None:
                unsteer(model, last=len(steering.records) - index)
