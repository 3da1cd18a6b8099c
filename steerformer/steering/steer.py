"""``steer``: edit a model in place, each call as plan → apply → measure → record.

    causal LM: b' = b + γ u  or  W' = W + γ u a, a·z ≈ 1   (activation addition as weights, docs/math.md §5d;
              the gain within a KL budget, ``calibrate.py``)
    steer:    W_O' = W_O + γ u (wᵀV⁺)      (docs/math.md §5; the algebra in ``algebra.py``)
    ablate:   W' = (I − s UUᵀ) W           (``mode="ablate"``: ``ablation.py``, docs/math.md §5b, §5e)

* plan (the model is not changed): the direction, the row a, the gain (given, from a strength, or
  searched), FFN pre-compensation — ending in the edits as values (:class:`~.edit.Edit`);
* apply: ``Steering.applying`` edits the model, checks the weights finite, and removes the edits
  bit for bit if a later step fails (the one rollback);
* measure: the held-out alignment and price (``measure.HeldOut``), the controlled dynamics and
  the spectrum after the edit;
* record: ``record.build_record`` fills the :class:`SteeringRecord`; the chain appends it
  (``steering_of(model)``), so ``unsteer`` undoes it bit for bit.

Computed in float64 from the stored weights and cast back to the model's dtype.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Iterator, Sequence

import torch

from ..configs import SteerConfig, progress_bar, renamed, with_options
from ..errors import InvalidArgumentError, bad_argument
from ..loading import load_tokenizer, open_source
from ..matrices import read_attention_weights, select_layers
from . import algebra
from .ablation import run_ablation
from .chain import Steering, retie, steering_of, unsteer, untie
from .common import CountedCurve, model_object, stores_transposed
from .sources import DirectionSource, check_vector, resolve_direction
from .edit import Edit, check_layer_materialized, edited_stored
from .measure import DynamicsProbe, HeldOut, compensate, dynamics_probe, encode, model_probe
from .record import SteeringRecord, build_record

log = logging.getLogger(__name__)


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

    Two edits. **Causal LMs, by default** (or ``max_kl=``): activation addition written as weights
    (``activation.py``) — after the layer(s) ``layer``/``layers`` (default: a scan of middle layers,
    the one that raises the concept's tokens most wins), along the direction taken at that layer
    (``token``/``text``: a word or phrase, by the templated contrast of ``calibrate.py``), with
    the largest gain whose teacher-forced KL on probe prompts stays within ``max_kl`` (default
    0.3 nats/token; docs/steering-chat.md). ``positions="skip-first"`` leaves the first token alone.
    **The paper's edit** (every other model, or any of ``gain``, ``strength``, ``target_alignment``,
    ``through_ffn``, ``solve="exact"``...; ``layer`` default -1), described below:

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
    all of it, or the last k calls. A ``SentenceTransformer`` is steered through its transformer.

    A negative ``gain``/``strength`` steers away from u (F' = F − |γ| u wᵀ); the gain search only
    steers toward. ``mode="ablate"``: remove u from the write of every layer in ``layers`` (default
    all), W_O' = (I − scale·uuᵀ) W_O (see :func:`ablate`; gain/strength/solve do not apply).

    The options (``max_kl, positions="skip-first", target_alignment (0.99), strength, gain, layer, solve="min-norm",
    measure="model", through_ffn, untie_last, dynamics_n_prompts=30, dynamics_tokens=10, seed=0,
    report=True, compensate_bias, progress, mode="steer", scale=1.0``) come as a
    :class:`~steerformer.configs.SteerConfig` or as its fields by keyword; the record stores them
    (``record.config``).
    """
    options = renamed(options, SteerConfig.renamed, "steer")
    cfg = with_options(config, SteerConfig, options, "steer")
    if cfg.mode == "ablate":
        return run_ablation(model, direction, cfg, token=token, eigvec=eigvec, text=text, layers=layers,
                            tokenizer=tokenizer, heldout_prompts=heldout_prompts)
    model = model_object(model, "steer")
    if calibration_of(cfg, model) == "kl":
        return steer_by_kl(model, direction, cfg, token=token, eigvec=eigvec, text=text, layers=layers,
                           prompts=prompts, heldout_prompts=heldout_prompts, tokenizer=tokenizer)
    if layers is not None:
        raise bad_argument("layers", layers, "no layers= with the paper's edit (gain, strength, target_alignment or "
                           "its options): one layer=", "Several layers are for the KL-calibrated edit (max_kl) "
                           "or mode='ablate'.")
    source = open_source(model)
    untied = None
    if cfg.untie_last:
        if not source.adapter.can_untie:
            raise bad_argument("untie_last", True, "a model whose layers share weights (ALBERT)")
        if steering_of(model) is not None:
            raise InvalidArgumentError("untie_last=True on a model that is already steered: unsteer it first.")
        untied = untie(model)
        source = open_source(model)
    adapter = source.adapter
    L = select_layers(cfg.edit_layer, adapter.n_layers, name="layer")[0]
    slot = adapter.layer_sequence()[L]
    check_layer_materialized(model, adapter, L, slot)
    tokenizer = load_tokenizer(model, tokenizer)
    try:
        with source.memoized():  # V/O read once per call (every read comes before the edit is applied)
            if cfg.report or (_searching(cfg) and cfg.measure == "dynamics"):
                read_attention_weights(source, list(range(L + 1)))  # Q/K/V/O up to L: the dynamics probe's read
            u_target, dsource = resolve_direction(model, source, L, direction=direction, token=token, eigvec=eigvec,
                                                  text=text, tokenizer=tokenizer)
            w = u_target if left is None else check_vector(left, adapter.d_model, name="left",
                                                           model_name=source.model_id)
            plan = plan_steer(model, source, L, slot, u_target, w, cfg, prompts=prompts, tokenizer=tokenizer)
            record = _apply_measure_record(model, source, plan, cfg, dsource, heldout_prompts=heldout_prompts,
                                           tokenizer=tokenizer, untied=untied)
    except BaseException:
        if untied is not None and steering_of(model) is None:
            retie(model, untied)
        raise
    if plan.choice is not None and not plan.choice.reached:
        log.warning("%s", plan.choice.message)
    return record


def _searching(cfg: SteerConfig) -> bool:
    return cfg.strength is None and cfg.gain is None


#: options that only the paper's edit (W_O' = W_O + γ u wᵀV⁺) has: any of them selects it
PAPER_OPTIONS = {"gain": None, "strength": None, "target_alignment": None, "through_ffn": False,
                 "untie_last": False, "compensate_bias": False, "solve": "min-norm", "measure": "model"}


def calibration_of(cfg: SteerConfig, model: Any) -> str:
    """"kl" (the residual edit calibrated by a KL budget) or "alignment" (the paper's edit: a gain, a
    strength or an alignment target). Default: "kl" for a causal LM, whose output a KL can price."""
    from .measure import head_kind

    paper = [k for k, v in PAPER_OPTIONS.items() if getattr(cfg, k) != v]
    if cfg.max_kl is not None:
        if paper:
            raise bad_argument(paper[0], getattr(cfg, paper[0]), f"no {paper[0]} with max_kl (an option of the "
                               "paper's edit)", "Pass max_kl for the KL-calibrated edit, or drop it.")
        if head_kind(model) != "causal-lm":
            raise bad_argument("max_kl", cfg.max_kl, f"a causal LM (a next-token head); {type(model).__name__} has "
                               "none", "Use target_alignment=, gain= or strength= on this model.")
        return "kl"
    if cfg.positions != "skip-first" and paper:
        raise bad_argument("positions", cfg.positions, "the default with the paper's edit", "It is an option of the "
                           "KL-calibrated edit.")
    return "kl" if not paper and head_kind(model) == "causal-lm" else "alignment"


# ---- the KL-calibrated edit (causal LMs) --------------------------------------------------------
def steer_by_kl(model: Any, direction: Any, cfg: SteerConfig, *, token: str | None, eigvec: int | None,
                text: str | None, layers: Any, prompts: Any, heldout_prompts: Any, tokenizer: Any) -> SteeringRecord:
    """Activation addition written as weights (``activation.py``) after the layer(s) chosen by a scan,
    along the concept's direction at each layer, with the largest gain within the KL budget
    (``calibrate.py``): plan → apply → measure → record."""
    from .activation import addition_edits, output_writer
    from .calibrate import (DEFAULT_MAX_KL, ContinuationProbe, concept_directions, concept_token_ids,
                            default_scan_layers, search_gain)

    source = open_source(model)
    adapter = source.adapter
    tokenizer = load_tokenizer(model, tokenizer)
    max_kl = DEFAULT_MAX_KL if cfg.max_kl is None else float(cfg.max_kl)
    if layers is not None and cfg.layer is not None:
        raise bad_argument("layers", layers, "either layer= or layers=, not both")
    fixed = select_layers(layers if layers is not None else cfg.layer, adapter.n_layers,
                          name="layers" if layers is not None else "layer") \
        if layers is not None or cfg.layer is not None else None
    candidates = fixed or default_scan_layers(adapter.n_layers)
    writers = {k: output_writer(adapter, k, source.model_id) for k in candidates}  # refuses before any work
    for k in candidates:
        check_layer_materialized(model, adapter, k, adapter.layer_sequence()[k])
    phrase = token if token is not None else text
    with source.memoized():
        if phrase is not None and (direction is not None or eigvec is not None or (token and text)):
            raise bad_argument("direction", "several sources", "exactly one of direction=, token=, eigvec=, text=")
        if phrase is not None:
            dirs, info = concept_directions(model, adapter, tokenizer, phrase, candidates)
            dsource = DirectionSource("token" if token is not None else "text", info)
            mass_ids = concept_token_ids(tokenizer, phrase)
        else:
            resolved = {k: resolve_direction(model, source, k, direction=direction, eigvec=eigvec, tokenizer=tokenizer)
                        for k in candidates}
            dirs = {k: u for k, (u, _) in resolved.items()}
            dsource = resolved[candidates[0]][1]
            mass_ids = []
        probe = ContinuationProbe.of(model, adapter, tokenizer, prompts)

        def plan(group: list[int]):
            scales = {k: probe.residual_scale(k) for k in group}
            inputs = {k: probe.writer_inputs(k, writers[k].module) for k in group}
            unit = addition_edits(model, {k: dirs[k] * scales[k] for k in group}, 1.0, positions=cfg.positions,
                                  inputs=inputs)

            def at(alpha: float) -> list[Edit]:
                return [dataclasses.replace(e, gain=e.gain * alpha,
                                            bias_delta=None if e.bias_delta is None else e.bias_delta * alpha)
                        for e in unit]

            def kl_at(alpha: float):
                trial = at(alpha)
                for e in trial:
                    e.apply(model, check=False)
                try:
                    lp = probe.logprobs(min(group))
                finally:
                    for e in reversed(trial):
                        e.remove(model, check=False)
                return probe.kl(lp), lp

            found = search_gain(kl_at, max_kl, 1.0)  # the gain found is α (× each layer's residual norm)
            return at(found.gain), found, scales

        groups = [fixed] if fixed else [[k] for k in candidates]
        scan = []
        for group in groups:
            edits, found, scales = plan(group)
            scan.append({"layers": group, "alpha": found.gain, "kl": found.kl, "evals": len(found.curve),
                         "concept_mass": probe.mass(found.logprobs, mass_ids), "residual_norm": scales,
                         "edits": edits, "search": found})
        best = max(scan, key=lambda r: r["concept_mass"]) if mass_ids else scan[len(scan) // 2]
        edits, found = best["edits"], best["search"]
        calibration = {"kind": "kl", "max_kl": max_kl, "kl_probe": found.kl, "alpha": found.gain,
                       "layers": best["layers"], "positions": cfg.positions, "message": found.message,
                       "concept_token_ids": mass_ids, "probe_prompts": len(probe.select),
                       "scan": [{k: v for k, v in r.items() if k not in ("edits", "search")} for r in scan]
                       if len(scan) > 1 else None}
        first = min(best["layers"])
        held = HeldOut.before(model, adapter, first, heldout_prompts, tokenizer) if cfg.report else None
        steering = steering_of(model) or Steering()
        with steering.applying(model, edits):
            measured = {"kl": found.kl, "kl_kind": "teacher-forced on the probe prompts' base continuations"}
            if held is not None:
                after = held.after(model, edits[0].u, found.gain)
                measured.update({"kl_heldout": after["kl"], "state_cosine": after["state_cosine"]})
            record = build_record(
                source, edits, steering.originals,
                {e.module: model.base_model.get_parameter(e.module).detach() for e in edits},
                direction_source=dsource.to_dict(), choice=found, measure="kl", target_alignment=None,
                measured={k: v for k, v in measured.items() if k != "kl_heldout"}, heldout_prompts=heldout_prompts,
                config=cfg.to_dict(), calibration={**calibration, "kl_heldout": measured.get("kl_heldout")})
        steering.push(model, record)
    return record


# ---- plan ----------------------------------------------------------------------------------------
@dataclasses.dataclass
class SteerPlan:
    """What one steer call writes, decided before the model changes: the edit and what was learned
    on the way (for the measurements and the record)."""

    edit: Edit
    target: torch.Tensor  # u*, what the alignment is measured against (the edit writes u)
    V: torch.Tensor  # the layer's value matrix, float64 CPU (the spectrum after the edit)
    spectrum_before: dict | None
    choice: algebra.StrengthChoice | None  # the gain search, when it ran
    through_ffn: dict | None
    dynamics: DynamicsProbe | None


def plan_steer(model: Any, source: Any, L: int, slot: int, u_target: torch.Tensor, w: torch.Tensor,
               cfg: SteerConfig, *, prompts: Any = None, tokenizer: Any = None) -> SteerPlan:
    """The edit of execution layer ``L`` (weight ``slot``) toward ``u_target`` with left vector ``w``:
    the row a = wᵀV⁺, the gain, FFN pre-compensation. Changes nothing in ``model``."""
    adapter = source.adapter
    base = model.base_model
    name = adapter.output_weight_name(slot)
    param = base.get_parameter(name)
    # float64 CPU copies: a = wᵀV⁺, spectra and reports run on the CPU; the edit itself is made on
    # the weight's device from u and a moved there once (edit.edited_stored)
    weights = read_attention_weights(source, [L], parts=("vo",), device="cpu")[L]
    V = weights.value_matrix()
    algebra.check_value_map(V, L, source.model_id)
    bias_name = name[: -len("weight")] + "bias" if name.endswith("weight") else None
    b_V = getattr(weights, "b_V", None)
    if cfg.compensate_bias and (b_V is None or bias_name is None or not _has_param(base, bias_name)):
        raise bad_argument("compensate_bias", True, "a layer with a value bias b_V and an output bias b_O",
                           f"Layer {L} of {source.model_id} has {'no value bias' if b_V is None else 'no output bias'}: "
                           "its edit shifts no bias, nothing to compensate.")
    searching = _searching(cfg)
    probe = None
    if cfg.report or cfg.solve == "min-norm" or cfg.through_ffn or (searching and cfg.measure == "model"):
        probe = model_probe(model, adapter, L, encode(model, prompts, tokenizer, name="prompts"))

    if cfg.solve == "exact":  # a = wᵀV⁺
        row = algebra.exact_row(V, w)
        if row.method == "lstsq":
            log.warning("V of layer %d is singular (cond %.3g): a = wᵀV⁺ by least squares", L, row.cond)
    else:
        row = algebra.ridge_row(V, w, *probe.split_inputs())
    transposed = stores_transposed(adapter)

    def stored(u: torch.Tensor, g: float | torch.Tensor) -> torch.Tensor:
        return edited_stored(param, u, row.a, g, transposed=transposed)

    spec_before = algebra.top_summary(None, factors=weights.layer_factors()) \
        if (cfg.report or cfg.strength is not None or searching) else None
    abs_l1 = spec_before["abs_lambda1"] if spec_before else None
    dyn = dynamics_probe(source, L, n_prompts=cfg.dynamics_n_prompts, n_tokens=cfg.dynamics_tokens, seed=cfg.seed) \
        if (cfg.report or (searching and cfg.measure == "dynamics")) else None

    def search(u: torch.Tensor, desc: str = "gain search") -> algebra.StrengthChoice:
        if cfg.measure == "dynamics":
            f = lambda g: dyn.alignment(algebra.delta_output(u, row.a, g), u)  # noqa: E731
        else:
            f = lambda g: probe.alignment(u_target, {name: stored(u, g)})  # noqa: E731
        curve = CountedCurve(f, desc, cfg.progress)
        try:
            return algebra.choose_gain(curve, cfg.target, scale=abs_l1)
        finally:
            curve.close()

    choice = ffn_info = None
    if cfg.gain is not None:
        g = float(cfg.gain)
    elif cfg.strength is not None:
        g = float(cfg.strength) * abs_l1
        if not g * float(row.a.abs().max()) < torch.finfo(param.dtype).max / 2:  # g·u·aᵀ itself overflows
            raise bad_argument("strength", cfg.strength, f"a strength whose edit is finite (gain = strength × "
                               f"|λ1| = {g:.3g} overflows the weights)", "Use a strength of at most ~1e5.")
    else:
        choice = search(u_target)
        g = choice.gain
    u = u_target
    if cfg.through_ffn:
        before_ffn = probe.alignment(u_target, {name: stored(u_target, g)})
        with progress_bar(cfg.progress, "through-ffn", total=60, unit="step") as bar:
            u, history = compensate(probe, u_target, lambda v: {name: stored(v, g)},
                                    on_step=lambda val: (bar.update(1), bar.set_postfix(alignment=f"{val:.3f}")))
        if searching:
            choice = search(u, "gain search (after FFN)")
            g = choice.gain
        ffn_info = {"alignment_without": before_ffn, "alignment_with_at_same_gain": history and max(history),
                    "steps": len(history), "gain_used_for_solve": g}
    # a has one block per query head: b_V repeated like V (grouped-query layers)
    bias_coef = float(row.a.cpu() @ weights.value_bias_heads().to(torch.float64).cpu()) if b_V is not None else None
    edit = Edit(module=name, layer=L, slot=slot, u=u.detach().cpu().clone(), a=row.a.detach().cpu().clone(), gain=g,
                kind="steer", solve=row.to_dict(), w=w.detach().cpu().clone(), w_eff=V.T @ row.a.cpu(),
                bias_coef=bias_coef, bias_module=bias_name if cfg.compensate_bias else None,
                compensate_bias=bool(cfg.compensate_bias), transposed=transposed)
    return SteerPlan(edit=edit, target=u_target, V=V, spectrum_before=spec_before, choice=choice,
                     through_ffn=ffn_info, dynamics=dyn)


def _has_param(base: Any, name: str) -> bool:
    try:
        base.get_parameter(name)
        return True
    except AttributeError:
        return False


# ---- apply, measure, record ----------------------------------------------------------------------
def _apply_measure_record(model: Any, source: Any, plan: SteerPlan, cfg: SteerConfig, dsource: DirectionSource, *,
                          heldout_prompts: Any, tokenizer: Any, untied: dict | None) -> SteeringRecord:
    adapter = source.adapter
    edit = plan.edit
    held = HeldOut.before(model, adapter, edit.layer, heldout_prompts, tokenizer) if cfg.report else None
    steering = steering_of(model) or Steering(untie=untied)
    param = model.base_model.get_parameter(edit.module)
    with steering.applying(model, [edit]):
        measured = {}
        if cfg.report:
            measured = held.after(model, plan.target, edit.gain)
            if plan.through_ffn is None:  # the prediction is about u itself, not a pre-compensated target
                measured["predicted_u_shift"] = held.predicted_u_shift(edit.w_eff, edit.gain)
            measured["alignment_dynamics_before"] = plan.dynamics.alignment(torch.zeros_like(edit.delta()), edit.u)
            measured["alignment_dynamics_after"] = plan.dynamics.alignment(edit.delta(), edit.u)
            W_new = adapter.output_weight_from_stored(param.detach().to(torch.float64).cpu())
            measured["spectrum_after"] = algebra.top_summary(None, factors=(W_new, plan.V))
        spec = plan.spectrum_before
        record = build_record(
            source, [edit], steering.originals, {edit.module: param.detach()}, direction_source=dsource.to_dict(),
            target=plan.target, untied=steering.untie is not None,
            abs_lambda1=spec["abs_lambda1"] if spec else None, spectrum_before=spec, choice=plan.choice,
            measure=cfg.measure, target_alignment=cfg.target, measured=measured,
            through_ffn=plan.through_ffn, heldout_prompts=heldout_prompts, config=cfg.to_dict())
    steering.push(model, record)  # the edit is applied: push only appends
    return record


# ---- a scoped edit -------------------------------------------------------------------------------
@contextlib.contextmanager
def steered(model: Any, direction: Any = None, **kwargs: Any) -> Iterator[SteeringRecord]:
    """``with steered(model, direction, gain=…) as rec:`` — :func:`steer` on entry (same arguments),
    and on exit, also on an exception, the edit is removed bit for bit (with any edit made after it
    inside the block). Edits made before the block stay."""
    rec = steer(model, direction, **kwargs)
    target = model_object(model, "steered")
    try:
        yield rec
    finally:
        steering = steering_of(target)
        if steering is not None:
            index = next((i for i, r in enumerate(steering.records) if r is rec), None)
            if index is not None:
                unsteer(target, last=len(steering.records) - index)
