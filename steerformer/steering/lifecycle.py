"""One steering call, written once: plan → apply → measure → record → push to the chain.

Every method (``steering/methods/``) runs through :func:`run`:

* **plan** — ``method.plan(call, cfg)`` decides everything without changing the model and returns a
  :class:`Plan`: the edits as values (:class:`~.edit.Edit`), where the direction came from, and what
  the record and the measurement need (the direction, the alignment target, the method's details);
* **apply** — ``Steering.applying`` edits the model, checks the weights finite and, if any later
  step fails, removes the edits bit for bit (the one rollback; an ALBERT untie made by the plan is
  undone too);
* **measure** — ``method.measure(call, plan, held)`` on the edited model (default: the held-out
  alignment and price of :class:`~.measure.HeldOut`, measured before the edit at
  ``plan.heldout_layer``); it may complete the plan's details;
* **record** — :func:`~.record.build_record` fills the :class:`~.record.SteeringRecord` from the plan
  (its core, and the method's details) and the measurements; the chain appends it
  (``steering_of(model)``), so ``unsteer`` undoes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..configs import Config
from ..loading import load_tokenizer, open_source
from .chain import Steering, retie, steering_of
from .common import model_object
from .edit import Edit
from .measure import HeldOut, default_measure, head_kind  # noqa: F401  (default_measure: a method's default measurement)
from .record import SteeringRecord, build_record
from .registry import call_options, choose_method, get_method, method_config


@dataclasses.dataclass
class Call:
    """What one ``steer`` call was given, the model opened once: the plan reads it, never changes it
    (except ``source``, which a plan that restructures the model, the ALBERT untie, re-opens)."""

    model: Any  # the transformers model (a SentenceTransformer already unwrapped)
    source: Any  # steerformer.loading.ModelSource of ``model`` (opened once per call)
    tokenizer: Any
    config: Any  # the call's SteerConfig (method, layer, report, progress); the method's own options: its cfg
    head: str  # measure.head_kind of the model: "causal-lm", "masked-lm" or "bare" (read once per call)
    direction: Any = None
    token: str | None = None
    eigvec: int | None = None
    text: str | None = None
    left: Any = None
    prompts: Any = None
    heldout_prompts: Any = None
    layers: Any = None  # several layers (the addition, ablation); None: the method's default

    @property
    def adapter(self) -> Any:
        return self.source.adapter


@dataclasses.dataclass
class Plan:
    """What a steering method writes, decided before the model changes, and what was learned on the
    way. ``edits`` are applied in order; the rest fills the record (``build_record``) and guides the
    measurement; ``details`` is the method's own (its ``Method.details`` dataclass), which its
    ``measure`` may complete."""

    edits: list[Edit]
    direction_source: dict = dataclasses.field(default_factory=dict)  # DirectionSource.to_dict(): where u came from
    #: what the call was asked to write or remove (default: the first edit's u; an ablation's (k, d))
    direction: torch.Tensor | None = None
    #: u* the held-out alignment is measured against (default: ``direction``)
    target: torch.Tensor | None = None
    message: str = ""  # how the gain was chosen, in words (the record's message)
    untied: dict | None = None  # the ALBERT untie the plan made (undone if the call fails)
    #: first edited execution layer, where the held-out probe starts (None: no held-out measurement)
    heldout_layer: int | None = None
    details: Any = None  # the method's record details
    extra: dict = dataclasses.field(default_factory=dict)  # what the method's measure needs, not recorded


def run(method: Any, call: Call, cfg: Any) -> SteeringRecord:
    """plan → apply → measure → record → push, for ``method`` with its options ``cfg``."""
    model = call.model
    plan = method.plan(call, cfg)
    try:
        held = HeldOut.before(model, call.adapter, plan.heldout_layer, call.heldout_prompts, call.tokenizer,
                              call.head) if call.config.report and plan.heldout_layer is not None else None
        steering = steering_of(model) or Steering(untie=plan.untied)
        with steering.applying(model, plan.edits):
            measured = method.measure(call, plan, held)
            weights = {e.module: model.base_model.get_parameter(e.module).detach() for e in plan.edits}
            record = build_record(call.source, plan, measured, steering.originals, weights, method=method.name,
                                  config={**call.config.to_dict(), **cfg.to_dict()},
                                  heldout_prompts=call.heldout_prompts)
        steering.push(model, record)  # the edits are applied: push only appends
    except BaseException:
        if plan.untied is not None and steering_of(model) is None:
            retie(model, plan.untied)
        raise
    return record


def dispatch(model: Any, direction: Any, config: Config | None, method: str | None, options: dict, where: str,
             **request: Any) -> SteeringRecord:
    """Choose the method, build its options, open the model once and run the lifecycle."""
    cfg, own, given_config = call_options(config, method, dict(options))
    chosen_name = choose_method(cfg, own)  # bad options are refused before the model is touched
    method_config(get_method(chosen_name), own, given_config) if chosen_name is not None else None
    model = model_object(model, where)
    head = head_kind(model)
    chosen = get_method(choose_method(cfg, own, head))  # again with the head: an option the model cannot use
    mcfg = method_config(chosen, own, given_config)
    tokenizer = load_tokenizer(model, request.pop("tokenizer"))
    return run(chosen, Call(model, open_source(model), tokenizer, cfg, head, direction=direction, **request), mcfg)


__all__ = ["Call", "Plan", "default_measure", "dispatch", "run"]
