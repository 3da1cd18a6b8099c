"""``addition``: activation addition written as weights (docs/math.md §5d), the default for a causal
LM — after the layer(s) ``layer``/``layers`` (default: a scan of middle layers; the one that raises
the concept's tokens most wins), along the concept's direction at each layer, with the largest gain
whose teacher-forced KL on probe prompts stays within ``max_kl`` (docs/steering-chat.md):

    b' = b + γ u   (the output writer has a bias and ``positions="all"``: exact)
    W' = W + γ u a,  a·z ≈ 1 on the writer's inputs (else; ``positions="skip-first"`` fits a·z ≈ 0 at
                    the first token)

The edit as weights is ``activation.addition_edits``; the probe, the concept's direction and the
gain search are ``calibrate.py``. Options: :class:`~steerformer.configs.AdditionConfig`."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...configs import AdditionConfig
from ...errors import bad_argument
from ...matrices import select_layers
from ..activation import addition_edits, output_writer
from ..calibrate import (ContinuationProbe, concept_directions, concept_token_ids, default_scan_layers,
                         search_gain)
from ..edit import Edit, check_layer_materialized
from ..lifecycle import Call, Plan
from ..measure import HeldOut, head_kind
from ..sources import DirectionSource, resolve_direction
from .registry import Method, register_method


class Addition(Method):
    """Activation addition as weights within a KL budget (module doc)."""

    config = AdditionConfig

    def plan(self, call: Call, cfg: Any) -> Plan:
        model, source, adapter, tokenizer = call.model, call.source, call.adapter, call.tokenizer
        if head_kind(model) != "causal-lm":
            raise bad_argument("max_kl", cfg.max_kl, f"a causal LM (a next-token head); {type(model).__name__} has "
                               "none", "Use target_alignment=, gain= or strength= on this model.")
        max_kl = float(cfg.max_kl)
        layers, layer = call.layers, call.config.layer
        if layers is not None and layer is not None:
            raise bad_argument("layers", layers, "either layer= or layers=, not both")
        fixed = select_layers(layers if layers is not None else layer, adapter.n_layers,
                              name="layers" if layers is not None else "layer") \
            if layers is not None or layer is not None else None
        candidates = fixed or default_scan_layers(adapter.n_layers)
        phrase = call.token if call.token is not None else call.text
        if not fixed and phrase is None:  # a raw direction has no concept tokens to scan by: one default layer
            candidates = [candidates[len(candidates) // 2]]
        layer_choice = ("given" if fixed else "scanned by the concept tokens' probability" if phrase is not None
                        else "default (the middle scan layer; a raw direction has no concept tokens to scan by: "
                             "give --layer to choose)")
        writers = {k: output_writer(adapter, k, source.model_id) for k in candidates}  # refuses before any work
        for k in candidates:
            check_layer_materialized(model, adapter, k, adapter.layer_sequence()[k])
        token, text = call.token, call.text
        with source.memoized():
            if phrase is not None and (call.direction is not None or call.eigvec is not None or (token and text)):
                raise bad_argument("direction", "several sources", "exactly one of direction=, token=, eigvec=, text=")
            if phrase is not None:
                dirs, info = concept_directions(model, adapter, tokenizer, phrase, candidates)
                dsource = DirectionSource("token" if token is not None else "text", info)
                mass_ids = concept_token_ids(tokenizer, phrase)
            else:
                resolved = {k: resolve_direction(model, source, k, direction=call.direction, eigvec=call.eigvec,
                                                 tokenizer=tokenizer) for k in candidates}
                dirs = {k: u for k, (u, _) in resolved.items()}
                dsource = resolved[candidates[0]][1]
                mass_ids = []
            probe = ContinuationProbe.of(model, adapter, tokenizer, call.prompts)

            def plan_group(group: list[int]):
                scales = {k: probe.residual_scale(k) for k in group}
                inputs = {k: probe.writer_inputs(k, writers[k].module) for k in group}
                unit = addition_edits(model, {k: dirs[k] * scales[k] for k in group}, 1.0, positions=cfg.positions,
                                      inputs=inputs, source=source)

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
                edits, found, scales = plan_group(group)
                scan.append({"layers": group, "alpha": found.gain, "kl": found.kl, "evals": len(found.curve),
                             "concept_mass": probe.mass(found.logprobs, mass_ids), "residual_norm": scales,
                             "edits": edits, "search": found})
        best = max(scan, key=lambda r: r["concept_mass"]) if mass_ids else scan[len(scan) // 2]
        edits, found = best["edits"], best["search"]
        calibration = {"kind": "kl", "max_kl": max_kl, "kl_probe": found.kl, "alpha": found.gain,
                       "layers": best["layers"], "layer_choice": layer_choice, "positions": cfg.positions,
                       "message": found.message,
                       "concept_token_ids": mass_ids, "probe_prompts": len(probe.select),
                       "scan": [{k: v for k, v in r.items() if k not in ("edits", "search")} for r in scan]
                       if len(scan) > 1 else None}
        return Plan(edits=edits, direction_source=dsource.to_dict(), choice=found, measure="kl",
                    calibration=calibration, heldout_layer=min(best["layers"]))

    def measure(self, call: Call, plan: Plan, held: HeldOut | None) -> dict:
        """The probe's KL at the gain found and, on the held-out sentences, the KL (into the
        calibration) and the state cosine."""
        found = plan.choice
        measured = {"kl": found.kl, "kl_kind": "teacher-forced on the probe prompts' base continuations"}
        kl_heldout = None
        if held is not None:
            after = held.after(call.model, plan.edits[0].u, found.gain)
            measured["state_cosine"] = after["state_cosine"]
            kl_heldout = after["kl"]
        plan.calibration = {**plan.calibration, "kl_heldout": kl_heldout}
        return measured


register_method("addition", Addition)

__all__ = ["Addition"]
