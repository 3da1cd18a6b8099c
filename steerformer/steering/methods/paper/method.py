"""``paper``: the papers' rank-1 edit of one attention layer's output matrix (docs/math.md §5; the
algebra in ``algebra.py`` beside it), the default for every model that is not a causal LM:

    W_O' = W_O + γ u (wᵀV⁺)

a = wᵀV⁺ exact (least squares when V is singular) or a ridge fit on the states entering the layer;
the gain given, from a strength (γ = strength·|λ1(F_layer)|), or the smallest reaching a target
alignment; optionally pre-compensated through the FFN, with the value bias's shift removed through
b_O, after giving an ALBERT model's last layer its own weights. Options:
:class:`~steerformer.configs.PaperConfig`."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import torch

from ....configs import progress_bar
from ....errors import InvalidArgumentError, bad_argument
from ....loading import open_source
from ....matrices import read_attention_weights, select_layers
from ...algebra import check_value_map, delta_output
from ...chain import retie, steering_of, untie
from ...common import CountedCurve, cosine, non_finite, stores_transposed, vector_hash
from ...edit import Edit, check_layer_materialized, edited_stored
from ...lifecycle import Call, Plan
from ...measure import HeldOut, encode, mean_abs_cos, model_probe
from ...record import Details, gain_curve_figure
from ...registry import Method, register_method
from ...sources import check_vector, resolve_direction
from . import algebra
from .config import PaperConfig
from .probes import DynamicsProbe, compensate, dynamics_probe, predicted_u_shift, split_inputs


@dataclasses.dataclass
class PaperDetails(Details):
    """What a paper edit's record adds to the core (docs/math.md §5): the target and left vectors, the
    solve, the strength, how the gain was chosen, the controlled dynamics and the spectrum of F before
    and after, the FFN pre-compensation, the honest-reporting quantities of §5b and the side of u."""

    target: list  # u* the alignment is measured against (= the direction unless through_ffn)
    left: list  # w (unit)
    left_sha256: str
    solve: dict  # method ("solve" | "lstsq" | "ridge"), cond_V, alpha, fit_error
    strength: float | None = None  # γ / |λ1(F_L)|
    # how the gain was chosen ("model" | "dynamics"; None: gain or strength given)
    measure: str | None = None
    target_alignment: float | None = None
    target_reached: bool | None = None
    curve: list = dataclasses.field(default_factory=list)  # (gain, alignment) evaluated by the search
    alignment_dynamics_before: float | None = None
    alignment_dynamics_after: float | None = None
    spectrum_before: dict | None = None  # lambda1, lambda2, gap of F_L
    spectrum_after: dict | None = None
    through_ffn: dict | None = None
    # honest reporting (docs/math.md §5b): the left vector actually applied and what it means
    w_eff_cos: float | None = None  # cos(w_eff, w), w_eff = Vᵀaᵀ (1 for an exact solve of a regular V)
    effective_strength: float | None = None  # γ |w_effᵀu| / |λ1|: comparable with the paper's s
    bias_shift_norm: float | None = None  # ‖γ (a·b_V) u‖: shift of every token's attention output
    compensate_bias: bool = False  # the shift was removed through b_O
    # which side of u: the signed mean cos of the final states, and whether the edit moved them to
    # the side that F' = F + γ u w_effᵀ predicts (sign of γ·mean w_effᵀx); False/None: agrees/unknown
    signed_alignment_model_before: float | None = None
    signed_alignment_model_after: float | None = None
    predicted_u_shift: float | None = None
    sign_disagreement: bool | None = None

    finite = ("strength", "alignment_dynamics_after", "w_eff_cos", "effective_strength", "bias_shift_norm")


def paper_details(edit: Edit, target: torch.Tensor, abs_lambda1: float | None, spectrum_before: dict | None, *,
                  choice: Any = None, cfg: PaperConfig | None = None, through_ffn: dict | None = None) -> PaperDetails:
    """The details of the planned ``edit`` (its measured fields are filled by :meth:`Paper.measure`)."""
    u, w = edit.u.to(torch.float64), edit.w.to(torch.float64)
    return PaperDetails(
        target=target.to(torch.float64).tolist(), left=w.tolist(), left_sha256=vector_hash(w), solve=dict(edit.solve),
        strength=float(edit.gain) / abs_lambda1 if abs_lambda1 else None,
        measure=cfg.measure if choice is not None else None,
        target_alignment=float(cfg.target) if choice is not None and cfg.target is not None else None,
        target_reached=choice.reached if choice is not None else None,
        curve=[list(p) for p in choice.curve] if choice is not None else [],
        spectrum_before=spectrum_before, through_ffn=through_ffn, w_eff_cos=cosine(edit.w_eff, w),
        effective_strength=abs(float(edit.gain)) * abs(float(edit.w_eff.to(torch.float64) @ u)) / abs_lambda1
        if abs_lambda1 else None,
        bias_shift_norm=edit.bias_shift_norm, compensate_bias=bool(edit.compensate_bias))

log = logging.getLogger(__name__)


class Paper(Method):
    """The papers' rank-1 output-matrix edit (module doc)."""

    config = PaperConfig
    details = PaperDetails

    def plan(self, call: Call, cfg: Any) -> Plan:
        model = call.model
        if call.layers is not None:
            raise bad_argument("layers", call.layers, "no layers= with the paper's edit (gain, strength, "
                               "target_alignment or its options): one layer=", "Several layers are for the "
                               "KL-calibrated edit (max_kl) or method='ablation'.")
        untied = None
        if cfg.untie_last:
            if not call.adapter.can_untie:
                raise bad_argument("untie_last", True, "a model whose layers share weights (ALBERT)")
            if steering_of(model) is not None:
                raise InvalidArgumentError("untie_last=True on a model that is already steered: unsteer it first.")
            untied = untie(model)
            call.source = open_source(model)  # the layers' weights changed: the model is read anew
        source, adapter = call.source, call.adapter
        try:
            L = select_layers(call.config.edit_layer, adapter.n_layers, name="layer")[0]
            slot = adapter.layer_sequence()[L]
            check_layer_materialized(model, adapter, L, slot)
            with source.memoized():  # V/O read once per call (every read comes before the edit is applied)
                if call.config.report or (searching(cfg) and cfg.measure == "dynamics"):
                    read_attention_weights(source, list(range(L + 1)))  # Q/K/V/O up to L: the dynamics probe's read
                u_target, dsource = resolve_direction(model, source, L, direction=call.direction, token=call.token,
                                                      eigvec=call.eigvec, text=call.text, tokenizer=call.tokenizer)
                w = u_target if call.left is None else check_vector(call.left, adapter.d_model, name="left",
                                                                    model_name=source.model_id)
                plan = plan_edit(model, source, L, slot, u_target, w, cfg, call.config,
                                 prompts=call.prompts, tokenizer=call.tokenizer)
        except BaseException:
            if untied is not None and steering_of(model) is None:
                retie(model, untied)
            raise
        chain = steering_of(model)
        plan.direction_source = dsource.to_dict()
        plan.untied = untied if untied is not None else (chain.untie if chain is not None else None)
        if plan.details.target_reached is False:
            log.warning("%s", plan.message)
        return plan

    def plan_on_disk(self, source: Any, call_config: Any, options: dict, config: Any = None, *, direction: Any = None,
                     eigvec: int | None = None, left: Any = None) -> tuple[Plan, PaperConfig]:
        """(the plan, its options) of the same edit made on a checkpoint on disk (``steer_checkpoint``,
        ``steer --lazy``): from the stored V and W_O of one layer alone — a = wᵀV⁻¹ (``solve="exact"``,
        the default here: min-norm fits a on states from forward passes) with a given gain or
        strength; every option that needs the model to run is refused by name. The edit's hashes are
        set by the caller, which applies it to the stored tensor."""
        cfg = config if isinstance(config, PaperConfig) else PaperConfig(solve="exact")
        cfg = dataclasses.replace(cfg, **options) if options else cfg
        check_lazy(cfg, direction)
        adapter = source.adapter
        L = select_layers(call_config.edit_layer, adapter.n_layers, name="layer")[0]
        slot = adapter.layer_sequence()[L]
        u, dsource = resolve_direction(None, source, L, direction=direction, eigvec=eigvec)
        w = u if left is None else check_vector(left, adapter.d_model, name="left", model_name=source.model_id)
        weights = read_attention_weights(source, [L], parts=("vo",))[L]  # float64 copies of V and W_O only
        V = weights.value_matrix()
        check_value_map(V, L, source.model_id)
        row = algebra.exact_row(V, w)
        if row.method == "lstsq":
            log.warning("V of layer %d is singular (cond %.3g): a = wᵀV⁺ by least squares", L, row.cond)
        spec_before = algebra.top_summary(None, factors=weights.layer_factors())  # |λ1| for the strength
        abs_l1 = spec_before["abs_lambda1"]
        g = float(cfg.gain) if cfg.gain is not None else float(cfg.strength) * abs_l1
        b_V = weights.value_bias_heads()  # per query head, like a (grouped-query layers repeat b_V)
        edit = Edit(module=adapter.output_weight_name(slot), layer=L, slot=slot, u=u.clone(), a=row.a.clone(), gain=g,
                    kind="steer", solve=row.to_dict(), w=w.clone(), w_eff=V.T @ row.a,
                    bias_coef=None if b_V is None else float(row.a @ b_V.to(torch.float64)),
                    transposed=stores_transposed(adapter))
        return Plan(edits=[edit], direction_source=dsource.to_dict(),
                    details=paper_details(edit, u, abs_l1, spec_before)), cfg

    def measure(self, call: Call, plan: Plan, held: HeldOut | None) -> dict:
        """The held-out alignment and price, the predicted side of u, the controlled dynamics and
        the spectrum of F_layer after the edit."""
        if held is None:
            return {}
        model, adapter, edit, d = call.model, call.adapter, plan.edits[0], plan.details
        measured = held.after(model, plan.target, edit.gain, signed=True)
        d.signed_alignment_model_before = measured.pop("signed_alignment_model_before")
        d.signed_alignment_model_after = measured.pop("signed_alignment_model_after")
        if d.through_ffn is None:  # the prediction is about u itself, not a pre-compensated target
            d.predicted_u_shift = predicted_u_shift(held.probe, edit.w_eff, edit.gain)
            d.sign_disagreement = bool(d.predicted_u_shift * (d.signed_alignment_model_after
                                                              - d.signed_alignment_model_before) < 0)
        dynamics = plan.extra["dynamics"]
        d.alignment_dynamics_before = dynamics.alignment(torch.zeros_like(edit.delta()), edit.u)
        d.alignment_dynamics_after = dynamics.alignment(edit.delta(), edit.u)
        param = model.base_model.get_parameter(edit.module)
        W_new = adapter.output_weight_from_stored(param.detach().to(torch.float64).cpu())
        d.spectrum_after = algebra.top_summary(None, factors=(W_new, plan.extra["V"]))
        if not all(math.isfinite(float(x)) for x in d.spectrum_after["lambda1"]):
            raise non_finite("record.details.spectrum_after", "record values")
        return measured

    # ---- words -------------------------------------------------------------------------------
    def summary_lines(self, record: Any) -> list[str]:
        """The layer and solve, the gain (nominal and effective strength), the alignments, the price,
        the spectrum, the bias shift and a sign disagreement, when there is one."""
        f = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
        g = lambda x: "n/a" if x is None else f"{x:.4g}"  # noqa: E731
        d = record.details
        lines = [
            f"layer {record.layer} ({record.module}), solve {d.solve['method']} (cond V = {d.solve['cond_V']:.3g})",
            f"gain {record.gain:.6g} = strength {g(d.strength)} x |lambda1| (nominal); effective strength "
            f"{g(d.effective_strength)} = gain |w_eff.u| / |lambda1|, cos(w_eff, w) = {f(d.w_eff_cos)}",
            f"alignment, controlled dynamics: {f(d.alignment_dynamics_before)} -> {f(d.alignment_dynamics_after)}",
            f"alignment, real model final states: {f(record.alignment_model_before)} -> {f(record.alignment_model_after)}",
            f"weight change |dW_O|/|W_O| = {record.weight_change:.4g}; KL ({record.kl_kind}) = {f(record.kl)}; "
            f"state cosine = {f(record.state_cosine)}",
        ]
        if d.spectrum_before and d.spectrum_after:
            lines.append(f"lambda1 {d.spectrum_before['lambda1'][0]:.4g} -> {d.spectrum_after['lambda1'][0]:.4g}, "
                         f"gap {d.spectrum_before['gap']:.4g} -> {d.spectrum_after['gap']:.4g}")
        if d.bias_shift_norm is not None:
            lines.append(f"bias shift |gain (a.b_V) u| = {d.bias_shift_norm:.4g} on every token's attention output"
                         + (" (compensated through b_O)" if d.compensate_bias else ""))
        if len(record.layers_changed) > 1:
            lines.append(f"shared weights: layers {record.layers_changed} all changed")
        if d.sign_disagreement:
            lines.append(f"SIGN DISAGREEMENT: F' = F + gain u w_eff^T predicts a shift toward "
                         f"{'+' if d.predicted_u_shift > 0 else '-'}u, but the final states moved to the other "
                         f"side (signed cos {d.signed_alignment_model_before:+.3f} -> "
                         f"{d.signed_alignment_model_after:+.3f}); with solve='exact' the heads' different "
                         "attention and the value bias can outweigh w^T x (docs/statistics.md)")
        if record.message:
            lines.append(record.message)
        return lines

    def card_formula(self, record: Any) -> str:
        return "W_O' = W_O + γ u (wᵀV⁺)  ⇒  F' = F + γ u wᵀ (the attention output, F = W_O·V; paper §2.3)"

    def gain_text(self, record: Any) -> str:
        strength = record.details.strength
        return f"γ = {record.gain:.6g}" + (f" = {strength:.4g} × abs(λ1)" if strength else "")

    def facts(self, record: Any) -> list[tuple[str, str]]:
        """The solve, how the gain was chosen, the controlled dynamics and λ1 before and after."""
        d = record.details
        f = lambda x, spec=".4f": "n/a" if x is None else format(x, spec)  # noqa: E731
        l1 = lambda s: f(s["lambda1"][0], ".4g") if s else "n/a"  # noqa: E731
        cond = d.solve.get("cond_V")
        chosen = (f"target alignment {d.target_alignment} in the {d.measure} — {record.message}" if d.measure
                  else "given gain/strength")
        return [("solve for wᵀV⁺", str(d.solve.get("method")) + (f" (cond V = {cond:.3g})" if cond is not None else "")),
                ("chosen by", chosen),
                ("alignment, controlled dynamics", f"{f(d.alignment_dynamics_before)} → {f(d.alignment_dynamics_after)}"),
                ("λ1 before → after", f"{l1(d.spectrum_before)} → {l1(d.spectrum_after)}")]

    def alignment_target(self, record: Any) -> list:
        """u*: the direction asked for (before any FFN pre-compensation)."""
        return record.details.target

    def plot(self, record: Any, directory: Any) -> list:
        """The alignment-vs-gain curve of the gain search, when one ran → ``steering_curve.png``."""
        d = record.details
        return gain_curve_figure(directory, d.curve, record.gain, f"mean alignment ({d.measure})",
                                 target=d.target_alignment)

    def phase_line(self, cfg: Any, call_config: Any, layers: Any, *, causal: bool, concept: bool) -> str:
        return "steering: the rank-1 edit (gain search on the alignment where needed) ..."


#: the options a lazy edit honours (with the call's layer); any other must keep its default
LAZY_OPTIONS = ("gain", "strength", "solve")


def check_lazy(cfg: PaperConfig, direction: Any) -> None:
    """What a lazy edit cannot honour, refused by name (never dropped silently): it reads only V
    and W_O of one layer and runs no forward pass."""
    if cfg.solve != "exact":
        raise bad_argument("solve", cfg.solve, "'exact' for a lazy edit (min-norm fits a on states from forward "
                           "passes)", "Pass solve='exact' (CLI: --solve exact), or drop --lazy.")
    if cfg.gain is None and cfg.strength is None:
        raise bad_argument("gain", None, "a fixed gain= or strength= for a lazy edit (the gain search runs the "
                           "model)", "Pass --gain G or --strength S, or drop --lazy.")
    for f in dataclasses.fields(cfg):
        if f.name not in LAZY_OPTIONS and getattr(cfg, f.name) != f.default:
            raise bad_argument(f.name, getattr(cfg, f.name), "the default with a lazy edit (it edits the "
                               "checkpoint on disk with no forward pass)", "Drop it, or steer without --lazy.")
    if hasattr(direction, "direction_source"):
        raise bad_argument("direction", type(direction).__name__, "an array or .npy path for a lazy edit")


def searching(cfg: PaperConfig) -> bool:
    """The gain is searched (neither a gain nor a strength given)."""
    return cfg.strength is None and cfg.gain is None


def plan_edit(model: Any, source: Any, L: int, slot: int, u_target: torch.Tensor, w: torch.Tensor,
              cfg: PaperConfig, call_config: Any, *, prompts: Any = None, tokenizer: Any = None) -> Plan:
    """The edit of execution layer ``L`` (weight ``slot``) toward ``u_target`` with left vector ``w``:
    the row a = wᵀV⁺, the gain, FFN pre-compensation. Changes nothing in ``model``."""
    report, progress = call_config.report, call_config.progress
    adapter = source.adapter
    base = model.base_model
    name = adapter.output_weight_name(slot)
    param = base.get_parameter(name)
    # float64 CPU copies: a = wᵀV⁺, spectra and reports run on the CPU; the edit itself is made on
    # the weight's device from u and a moved there once (edit.edited_stored)
    weights = read_attention_weights(source, [L], parts=("vo",), device="cpu")[L]
    V = weights.value_matrix()
    check_value_map(V, L, source.model_id)
    bias_name = name[: -len("weight")] + "bias" if name.endswith("weight") else None
    b_V = getattr(weights, "b_V", None)
    if cfg.compensate_bias and (b_V is None or bias_name is None
                                or bias_name not in dict(base.named_parameters(remove_duplicate=False))):
        raise bad_argument("compensate_bias", True, "a layer with a value bias b_V and an output bias b_O",
                           f"Layer {L} of {source.model_id} has {'no value bias' if b_V is None else 'no output bias'}: "
                           "its edit shifts no bias, nothing to compensate.")
    search_gain = searching(cfg)
    floor = cfg.state_cosine_floor if search_gain else 0.0  # the damage budget of the gain search
    probe = None
    if report or cfg.solve == "min-norm" or cfg.through_ffn or (search_gain and cfg.measure == "model") or floor > 0:
        probe = model_probe(model, adapter, L, encode(model, prompts, tokenizer, name="prompts"))

    if cfg.solve == "exact":  # a = wᵀV⁺
        row = algebra.exact_row(V, w)
        if row.method == "lstsq":
            log.warning("V of layer %d is singular (cond %.3g): a = wᵀV⁺ by least squares", L, row.cond)
    else:
        row = algebra.ridge_row(V, w, *split_inputs(probe))
    transposed = stores_transposed(adapter)

    def stored(u: torch.Tensor, g: float | torch.Tensor) -> torch.Tensor:
        return edited_stored(param, u, row.a, g, transposed=transposed)

    spec_before = algebra.top_summary(None, factors=weights.layer_factors()) \
        if (report or cfg.strength is not None or search_gain) else None
    abs_l1 = spec_before["abs_lambda1"] if spec_before else None
    dyn: DynamicsProbe | None = dynamics_probe(source, L, n_prompts=cfg.dynamics_n_prompts,
                                               n_tokens=cfg.dynamics_tokens, seed=cfg.seed) \
        if (report or (search_gain and cfg.measure == "dynamics")) else None

    def search(u: torch.Tensor, desc: str = "gain search") -> algebra.StrengthChoice:
        cosines: dict[float, float] = {}  # gain -> mean cosine of the final states with the base model's
        values: dict[float, float] = {}  # gain -> alignment (-1 beyond the budget)

        def evaluate(g: float) -> float:
            if floor <= 0 and cfg.measure == "dynamics":
                values[g] = dyn.alignment(delta_output(u, row.a, g), u)
                return values[g]
            with torch.no_grad():
                final = probe.final_states({name: stored(u, g)})
            cosines[g] = state_cosine(final, probe)
            if cosines[g] < floor:
                values[g] = -1.0  # beyond the damage budget: never the choice
            elif cfg.measure == "dynamics":
                values[g] = dyn.alignment(delta_output(u, row.a, g), u)
            else:
                with torch.no_grad():
                    values[g] = float(mean_abs_cos(final, u_target, probe.mask))
            return values[g]

        curve = CountedCurve(evaluate, desc, progress)
        try:
            choice = algebra.choose_gain(curve, cfg.target, scale=abs_l1)
            if floor > 0 and not choice.reached and any(c < floor for c in cosines.values()):
                choice = within_budget(curve, cosines, values, floor, cfg.target)
            return choice
        finally:
            curve.close()

    choice = ffn_info = None
    if cfg.gain is not None:
        g = float(cfg.gain)
    elif cfg.strength is not None:
        if not abs_l1 > 0:  # an all-zero output matrix (or a nilpotent W_O·V): every strength is gain 0
            raise bad_argument("strength", cfg.strength, f"a layer whose |λ1| is not 0 (layer {L} of "
                               f"{source.model_id} has |λ1(F)| = {abs_l1:.3g}, its output matrix "
                               f"{'is all zero' if not bool(param.detach().any()) else 'maps nothing back'}: "
                               f"gain = strength × |λ1| would be 0, an edit that changes nothing)",
                               "Give the gain itself (--gain) or steer another layer (--layer).")
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
        with progress_bar(progress, "through-ffn", total=60, unit="step") as bar:
            u, history = compensate(probe, u_target, lambda v: {name: stored(v, g)},
                                    on_step=lambda val: (bar.update(1), bar.set_postfix(alignment=f"{val:.3f}")))
        if search_gain:
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
    return Plan(edits=[edit], direction_source={}, target=u_target,
                message=choice.message if choice is not None else "", heldout_layer=L,
                details=paper_details(edit, u_target, abs_l1, spec_before, choice=choice, cfg=cfg, through_ffn=ffn_info),
                extra={"V": V, "dynamics": dyn})


def state_cosine(final: torch.Tensor, probe: Any) -> float:
    """Mean cosine, over the probe's real tokens, of the final states ``final`` with the base model's:
    the damage the paper edit's gain search keeps above ``min_state_cosine``."""
    cos = torch.nn.functional.cosine_similarity(final.to(torch.float64), probe.final_before.to(final.device,
                                                torch.float64), dim=-1)
    return float(cos[probe.mask.to(cos.device)].mean())


def within_budget(curve: Any, cosines: dict[float, float], values: dict[float, float], floor: float,
                  target: float, steps: int = 12) -> Any:
    """The target alignment is out of reach within the damage budget: the largest gain whose final
    states keep a mean cosine >= ``floor`` (bisection on log γ between the largest gain evaluated
    inside the budget and the smallest outside it), said in the choice's message."""
    inside = [g for g, c in cosines.items() if c >= floor and g > 0]
    outside = [g for g, c in cosines.items() if c < floor and g > 0]
    lo = max(inside) if inside else min(outside) * 1e-6
    hi = min(g for g in outside if g > lo) if any(g > lo for g in outside) else None
    if hi is not None:
        for _ in range(steps):
            mid = math.exp((math.log(lo) + math.log(hi)) / 2)
            curve(mid)
            lo, hi = (mid, hi) if cosines[mid] >= floor else (lo, mid)
    if lo not in cosines:
        curve(lo)
    value = curve(lo)
    message = (f"target alignment {target:g} is out of reach within the damage budget: the largest gain keeping the "
               f"final states' mean cosine with the base model's >= {floor:g} is {lo:.6g} (alignment {value:.4f}, "
               f"cosine {cosines[lo]:.4f}); a larger gain changes the model more (min_state_cosine=0 lifts the "
               "budget)")
    return algebra.StrengthChoice(gain=lo, alignment=value, reached=False, best_alignment=value, best_gain=lo,
                                  curve=sorted(values.items()), message=message)


register_method("paper", Paper)

__all__ = ["Paper", "PaperDetails", "check_lazy", "paper_details", "plan_edit", "searching"]
