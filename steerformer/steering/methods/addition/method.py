"""``addition``: activation addition written as weights (docs/math.md §5d), the default for a causal
LM — after the layer(s) ``layer``/``layers`` (default: a scan of middle layers; the one that raises
the concept's tokens most wins), along the concept's direction at each layer (the templated contrast,
``calibrate.concept_directions``), with the largest gain whose teacher-forced KL on probe prompts stays
within ``max_kl`` (default 0.5: the rule chosen on rated answers, docs/steering-chat.md):

    b' = b + γ u   (the output writer has a bias and ``positions="all"``: exact)
    W' = W + γ u a,  a·z ≈ 1 on the writer's inputs (else; ``positions="skip-first"`` fits a·z ≈ 0 at
                    the first token)

What is learned once per (model, concept) — probe, directions, unit edits — is a :class:`KLPlanner`,
so :func:`kl_curve` gives the edit at several budgets with one probe and one layer choice."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

from ....configs import SteerConfig, check_max_kl, select_layers
from ....errors import bad_argument
from ...algebra import search_gain
from .calibrate import ContinuationProbe, concept_directions, concept_token_ids, default_scan_layers
from ...common import added_vector, model_object
from ...edit import Edit, check_layer_materialized
from ...lifecycle import Call, Plan
from ...measure import HeldOut, head_kind
from ...record import Details, gain_curve_figure
from ...registry import Method, register_method
from ...sources import DirectionSource, resolve_direction
from .config import AdditionConfig
from .weights import addition_edits

log = logging.getLogger(__name__)


@dataclasses.dataclass
class AdditionDetails(Details):
    """What an addition's record adds to the core: the KL calibration (docs/math.md §5d) — the budget
    and what it bounds, the gain α (× each layer's residual norm) and its search, the layer scan and
    how the layer was chosen, the KL on held-out sentences (the KL on the report answers, once
    evaluated, is the evaluation's)."""

    layers: list  # the layer(s) the addition acts after
    positions: str  # "skip-first" | "all"
    max_kl: float  # the budget
    kl_probe: float  # the probe KL at the gain found: the one the budget bounds
    alpha: float  # the gain, × each layer's residual norm
    measure: str = "kl"  # what the gain search measured
    target_reached: bool | None = None  # the gain found is within the budget
    curve: list = dataclasses.field(default_factory=list)  # (α, probe KL) evaluated by the search
    concept_token_ids: list = dataclasses.field(default_factory=list)  # the tokens the layer scan compares
    probe_prompts: int = 0
    budget_bounds: str = ""  # what the budget bounds, in words
    layer_choice: str = ""  # how the layer was chosen
    scan: list | None = None  # per scanned layer: α, probe KL, concept-token probability (None: one layer)
    kl_heldout: float | None = None  # KL on the held-out sentences (a check, not bounded)

    finite = ("kl_probe", "alpha", "kl_heldout")


@dataclasses.dataclass
class KLPlanner:
    """What the KL-calibrated edit learns once per (model, concept): the probe (selection prompts),
    the direction at each candidate layer and the unit edit of each layer group — so that a budget
    is a gain search alone (a few re-runs of the upper blocks), and a curve over budgets
    (:func:`kl_curve`) recalibrates nothing else."""

    model: Any
    source: Any
    probe: Any  # calibrate.ContinuationProbe
    dirs: dict
    writers: dict
    positions: str
    mass_ids: list
    units: dict = dataclasses.field(default_factory=dict)  # tuple(group) -> (unit edits, residual norms)

    def unit(self, group: Sequence[int]) -> tuple[list[Edit], dict]:
        key = tuple(group)
        if key not in self.units:
            scales = {k: self.probe.residual_scale(k) for k in group}
            inputs = {k: self.probe.writer_inputs(k, self.writers[k].module) for k in group}
            self.units[key] = (addition_edits(self.model, {k: self.dirs[k] * scales[k] for k in group}, 1.0,
                                              positions=self.positions, inputs=inputs, source=self.source), scales)
        return self.units[key]

    def at(self, group: Sequence[int], alpha: float) -> list[Edit]:
        """The edits of ``group`` at gain α (× each layer's residual norm)."""
        return [e.scaled(alpha) for e in self.unit(group)[0]]

    def search(self, group: Sequence[int], max_kl: float):
        """(edits, the gain search, residual norms): the largest α within ``max_kl`` on the probe."""

        def kl_at(alpha: float):
            trial = self.at(group, alpha)
            for e in trial:
                e.apply(self.model, check=False)
            try:
                lp = self.probe.rerun(min(group))
            finally:
                for e in reversed(trial):
                    e.remove(self.model, check=False)
            return self.probe.kl(lp), lp

        found = search_gain(kl_at, max_kl, 1.0)  # the gain found is α (× each layer's residual norm)
        return self.at(group, found.gain), found, self.unit(group)[1]

    def scan(self, groups: Sequence[Sequence[int]], max_kl: float) -> list[dict]:
        """Each group calibrated to ``max_kl``: its α, probe KL, concept-token mass and edits."""
        rows = []
        for group in groups:
            edits, found, scales = self.search(group, max_kl)
            rows.append({"layers": list(group), "alpha": found.gain, "kl": found.kl, "evals": len(found.curve),
                         "concept_mass": self.probe.mass(found.logprobs, self.mass_ids), "residual_norm": scales,
                         "edits": edits, "search": found})
        return rows


def prepare(call: Call, cfg: Any) -> tuple[KLPlanner, list[list[int]], DirectionSource]:
    """The checks and the once-per-concept work: (planner, layer groups to scan, where the direction
    came from). Call inside ``call.source.memoized()``."""
    model, source, adapter, tokenizer = call.model, call.source, call.adapter, call.tokenizer
    if call.head != "causal-lm":
        raise bad_argument("max_kl", cfg.max_kl, f"a causal LM (a next-token head); {type(model).__name__} has "
                           "none", "Use target_alignment=, gain= or strength= on this model.")
    layers, layer = call.layers, call.config.layer
    if layers is not None and layer is not None:
        raise bad_argument("layers", layers, "either layer= or layers=, not both")
    fixed = select_layers(layers if layers is not None else layer, adapter.n_layers,
                          name="layers" if layers is not None else "layer") \
        if layers is not None or layer is not None else None
    candidates = fixed or default_scan_layers(adapter.n_layers)
    token, text = call.token, call.text
    phrase = token if token is not None else text
    if not fixed and phrase is None:  # a raw direction has no concept tokens to scan by: one default layer
        candidates = [candidates[len(candidates) // 2]]
    writers = {k: adapter.last_writer(k, source.model_id) for k in candidates}  # refuses before any work
    for k in candidates:
        check_layer_materialized(model, adapter, k, adapter.layer_sequence()[k])
    if phrase is not None and (call.direction is not None or call.eigvec is not None or (token and text)):
        raise bad_argument("direction", "several sources", "exactly one of direction=, token=, eigvec=, text=")
    if phrase is not None:
        dirs, info = concept_directions(model, adapter, tokenizer, phrase, candidates,
                                        name="token" if token is not None else "text")
        dsource = DirectionSource("token" if token is not None else "text", info)
        mass_ids = concept_token_ids(tokenizer, phrase)
    else:
        resolved = {k: resolve_direction(model, source, k, direction=call.direction, eigvec=call.eigvec,
                                         tokenizer=tokenizer) for k in candidates}
        dirs = {k: u for k, (u, _) in resolved.items()}
        dsource = resolved[candidates[0]][1]
        mass_ids = []
    probe = ContinuationProbe.of(model, adapter, tokenizer, call.prompts)
    planner = KLPlanner(model=model, source=source, probe=probe, dirs=dirs, writers=writers,
                        positions=cfg.positions, mass_ids=mass_ids)
    return planner, ([fixed] if fixed else [[k] for k in candidates]), dsource


def choose_layer(call: Call, scan: list[dict], planner: KLPlanner) -> tuple[dict, str]:
    """The scan's winner and how it was chosen (docs/math.md §5d, "Selection and report"): the layer
    whose edit at the budget puts the most probability on the concept's tokens at the probe's
    continuations (on the rated development set the scan's layer was the best fixed layer too)."""
    if len(scan) == 1:
        given = call.layers is not None or call.config.layer is not None
        return scan[0], "given" if given else ("default (the middle scan layer; a raw direction has no concept "
                                               "tokens to scan by: give --layer to choose)")
    if not planner.mass_ids:
        return scan[len(scan) // 2], "the middle of the scan (no concept tokens)"
    return max(scan, key=lambda r: r["concept_mass"]), "concept-token probability on the probe continuations"


class Addition(Method):
    """Activation addition as weights, its gain chosen by the judge within a KL ceiling or the largest
    within a KL budget (module doc)."""

    config = AdditionConfig
    details = AdditionDetails

    def plan(self, call: Call, cfg: Any) -> Plan:
        with call.source.memoized():
            planner, groups, dsource = prepare(call, cfg)
            scan = planner.scan(groups, cfg.budget)
            best, layer_choice = choose_layer(call, scan, planner)
        found = best["search"]
        details = AdditionDetails(
            layers=best["layers"], positions=cfg.positions, max_kl=cfg.budget, kl_probe=found.kl, alpha=found.gain,
            target_reached=found.reached, curve=[list(p) for p in found.curve], concept_token_ids=planner.mass_ids,
            probe_prompts=len(planner.probe.select),
            budget_bounds="KL(base || steered) per token, teacher-forced on the base model's continuations of the "
                          "probe (selection) prompts",
            layer_choice=layer_choice,
            scan=[{k: v for k, v in r.items() if k not in ("edits", "search")} for r in scan] if len(scan) > 1 else None)
        return Plan(edits=best["edits"], direction_source=dsource.to_dict(), message=found.message, details=details,
                    heldout_layer=min(best["layers"]))

    def measure(self, call: Call, plan: Plan, held: HeldOut | None) -> dict:
        """The probe's KL at the gain found and, on the held-out sentences, the KL (into the
        calibration) and the state cosine."""
        measured = {"kl": plan.details.kl_probe, "kl_kind": "teacher-forced on the probe prompts' base continuations"}
        if held is not None:
            after = held.after(call.model, plan.edits[0].u, plan.details.alpha)
            measured["state_cosine"] = after["state_cosine"]
            plan.details.kl_heldout = after["kl"]
        return measured

    # ---- words -------------------------------------------------------------------------------
    def summary_lines(self, record: Any) -> list[str]:
        """Where the addition acts and how its layer was chosen, the gain, the KL the budget bounds,
        the layer scan, the evaluation when one ran."""
        f = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
        g = lambda x: "n/a" if x is None else f"{x:.4g}"  # noqa: E731
        cal = record.details.to_dict()
        how = "; ".join(f"layer {e.layer}: {e.module} " + ("bias += c v (exact)" if e.solve.get("method") == "bias"
                        else f"+ gain u a, a.z = {e.solve.get('fit_mean', float('nan')):.3f} "
                             f"(cv {e.solve.get('fit_cv', float('nan')):.3f}) on the probe")
                        for e in record.edits)
        chosen = f" ({cal['layer_choice']})" if cal.get("layer_choice") else ""
        lines = [f"activation addition as weights after layer(s) {cal.get('layers', [record.layer])}{chosen}: {how}",
                 f"gain {cal.get('alpha', float('nan')):.4g} x residual norm; {record.message}",
                 f"KL {record.kl_kind} = {f(record.kl)}: the one the budget {g(cal.get('max_kl'))} bounds; "
                 f"KL on held-out sentences = {f(cal.get('kl_heldout'))} (a check, not bounded); "
                 f"weight change |dW|/|W| = {record.weight_change:.4g}"]
        if cal.get("scan"):
            lines.append("layer scan (concept-token probability at the budget): " + ", ".join(
                f"{r['layers'][0]}: {r['concept_mass']:.4f}" for r in cal["scan"])
                + f"; chosen by {cal.get('layer_choice', 'concept-token probability')}")
        if cal.get("budget_bounds"):
            held = (record.evaluation or {}).get("kl")
            lines.append(f"the budget bounds the {cal['budget_bounds']}: {f(cal.get('kl_probe'))}; on the report "
                         "questions' answers: " + (f"{held:.3g}" if held is not None else
                                                   "not measured (evaluate_record / --evaluate)"))
        return lines + self.evaluation_lines(record)

    def card_formula(self, record: Any) -> str:
        e = record.edits[0]
        where = {"mlp": "MLP output", "attention": "attention output"}.get(e.writer, "writer")
        if e.solve.get("method") == "bias":
            return (f"b' = b + γ u (the bias of the {where}, `{e.bias_module or e.module}`): adds γ u after block "
                    f"{e.layer}, exactly")
        return (f"W' = W + γ u aᵀ (the {where}, `{e.module}`), a·z ≈ 1 on the probe: adds γ u (a·z) ≈ γ u "
                f"after block {e.layer}")

    def gain_text(self, record: Any) -> str:
        per = ", ".join(f"layer {e.layer}: γ = {float(added_vector(e).norm()):.4g}" for e in record.edits)
        return f"{record.details.alpha:.4g} × residual norm ({per})"

    def facts(self, record: Any) -> list[tuple[str, str]]:
        """How the gain and the layer were chosen, what the budget bounds, the KL on held-out text."""
        d = record.details
        ev = record.evaluation or {}
        chosen = (f"the largest gain whose KL on the probe continuations stays within the KL budget of {d.max_kl} "
                  f"nats/token, after layer(s) {d.layers}" + (f" (layer: {d.layer_choice})" if d.layer_choice else "")
                  + (f"; KL on the report questions' answers {ev['kl']:.3f} (a check, not bounded)"
                     if ev.get("kl") is not None else "") + f" — {record.message}")
        return [("chosen by", chosen), ("gain α", f"{d.alpha:.4g} × the residual norm"),
                ("KL on held-out sentences (a check, not bounded)",
                 "n/a" if d.kl_heldout is None else f"{d.kl_heldout:.4g}")]

    def report_section(self, record: Any) -> dict:
        """The layer scan (each layer calibrated to the budget, then chosen) and what the dose curve
        marks: the budget, and the probe's KL along the gain search (× the chosen gain)."""
        d = record.details
        section: dict = {"title": "Layer scan", "dose": {
            "budget": d.max_kl,
            "probe": sorted((a / d.alpha, k) for a, k in d.curve if d.alpha and a is not None and k is not None),
            "note": "The gain was chosen as the largest whose KL on the probe's text stays within the budget, so "
                    "every strength up to 1 × lies inside it (green band); the KL on the report answers is measured "
                    "on other text and may differ."}}
        if not d.scan:
            section["text"] = f"No layer scan: layer(s) {d.layers} ({d.layer_choice or 'given'})."
            return section
        section["text"] = f"Each layer calibrated to the KL budget, then chosen by: {d.layer_choice}."
        section["table"] = {
            "header": ["layer(s)", "gain α (× residual norm)", "probe KL", "concept-token probability", ""],
            "rows": [[", ".join(str(k) for k in r.get("layers", [])), r.get("alpha"), r.get("kl"), r.get("concept_mass"),
                      "✓ chosen" if list(r.get("layers", [])) == list(d.layers) else ""] for r in d.scan]}
        return section

    def plot(self, record: Any, directory: Any) -> list:
        """The probe KL against the gain α of the search → ``steering_curve.png``."""
        d = record.details
        return gain_curve_figure(directory, d.curve, d.alpha, "mean KL (kl)")

    def phase_line(self, cfg: Any, call_config: Any, layers: Any, *, causal: bool, concept: bool) -> str:
        layer = call_config.layer
        where = (f"layer {layer}" if layer is not None else f"layers {layers}" if layers else
                 "a layer scan first (give --layer to skip it)" if concept else
                 "the default layer (no concept-token scan for a raw direction; --layer chooses)")
        return (f"steering: probe continuations, {where}, then the gain search within the KL budget (minutes on a CPU; "
                "--quiet hides these lines) ...")


register_method("addition", Addition)

__all__ = ["Addition", "AdditionDetails", "KLPlanner", "kl_curve"]


def kl_curve(model: Any, budgets: Sequence[float], direction: Any = None, *, token: str | None = None,
             text: str | None = None, eigvec: int | None = None, tokenizer: Any = None,
             layers: Sequence[int] | int | None = None, prompts: Sequence[str] | None = None,
             **options: Any) -> dict:
    """The addition at each KL budget of ``budgets`` with one probe, one set of directions and one
    layer choice (the scan at ``max_kl``, default 0.5, chosen as ``steer`` chooses) — each further
    budget is a gain search at that layer alone. Nothing is applied: returns ``{"layers",
    "layer_choice", "scan", "points": [{"max_kl", "kl_probe", "alpha", "edits"}, ...]}``; apply a
    point with ``edits_applied(model, point["edits"])`` (each scanned layer's edits at ``max_kl`` are
    in ``scan`` too). Options as ``steer``'s addition (``max_kl``, ``layer``, ``positions``)."""
    from ....loading import load_tokenizer, open_source

    shared = {f.name for f in dataclasses.fields(SteerConfig)}
    call_config = SteerConfig(**{k: v for k, v in options.items() if k in shared})
    cfg = AdditionConfig(**{k: v for k, v in options.items() if k not in shared})
    budgets = [check_max_kl(b) for b in budgets]
    if not budgets:
        raise bad_argument("budgets", budgets, "at least one KL budget > 0 (nats per token)")
    model = model_object(model, "kl_curve")
    call = Call(model, open_source(model), load_tokenizer(model, tokenizer), call_config, head_kind(model),
                direction=direction, token=token, eigvec=eigvec, text=text, prompts=prompts, layers=layers)
    with call.source.memoized():
        planner, groups, _ = prepare(call, cfg)
        scan = planner.scan(groups, cfg.budget)
        best, how = choose_layer(call, scan, planner)
        points = []
        for b in budgets:
            edits, found, _ = planner.search(best["layers"], b)
            points.append({"max_kl": b, "kl_probe": found.kl, "alpha": found.gain, "edits": edits})
    return {"layers": best["layers"], "layer_choice": how, "points": points,
            "scan": [{k: v for k, v in r.items() if k != "search"} for r in scan]}
