"""One steering call, written once: plan → apply → measure → record → push to the chain.

Every method (``steering/methods/``) runs through :func:`run`:

* **plan** — ``method.plan(call, cfg)`` decides everything without changing the model and returns a
  :class:`Plan`: the edits as values (:class:`~.edit.Edit`), where the direction came from, and what
  the record and the measurement need (the gain search, the calibration, the alignment target);
* **apply** — ``Steering.applying`` edits the model, checks the weights finite and, if any later
  step fails, removes the edits bit for bit (the one rollback; an ALBERT untie made by the plan is
  undone too);
* **measure** — ``method.measure(call, plan, held)`` on the edited model (default: the held-out
  alignment and price of :class:`~.measure.HeldOut`, measured before the edit at
  ``plan.heldout_layer``);
* **record** — :func:`~.record.build_record` fills the :class:`~.record.SteeringRecord` from the plan
  and the measurements; the chain appends it (``steering_of(model)``), so ``unsteer`` undoes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .chain import Steering, retie, steering_of
from .edit import Edit
from .measure import HeldOut, default_measure  # noqa: F401  (default_measure: a method's default measurement)
from .record import SteeringRecord, build_record


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
    measurement."""

    edits: list[Edit]
    direction_source: dict = dataclasses.field(default_factory=dict)  # DirectionSource.to_dict(): where u came from
    #: u* the alignment is measured against (default: the first edit's u)
    target: torch.Tensor | None = None
    #: what the call was asked to write or remove (default: the first edit's u; an ablation's (k, d))
    direction: torch.Tensor | None = None
    #: the gain search, when one ran: ``.gain``, ``.reached``, ``.message``, ``.curve``
    choice: Any = None
    measure: str | None = None  # what the search measured ("model", "dynamics", "kl")
    target_alignment: float | None = None
    message: str = ""  # the record's message when no search ran
    abs_lambda1: float | None = None  # |λ1(F_layer)|: gives the record's strength
    spectrum_before: dict | None = None
    through_ffn: dict | None = None
    calibration: dict | None = None  # the KL-budget calibration (max_kl, the layer scan)
    untied: dict | None = None  # the ALBERT untie the plan made (undone if the call fails)
    #: first edited execution layer, where the held-out probe starts (None: no held-out measurement)
    heldout_layer: int | None = None
    heldout_prompts: Any = None  # set by :func:`run` from the call
    extra: dict = dataclasses.field(default_factory=dict)  # anything the method's measure needs


def run(method: Any, call: Call, cfg: Any) -> SteeringRecord:
    """plan → apply → measure → record → push, for ``method`` with its options ``cfg``."""
    model = call.model
    plan = method.plan(call, cfg)
    try:
        plan.heldout_prompts = call.heldout_prompts
        held = HeldOut.before(model, call.adapter, plan.heldout_layer, call.heldout_prompts, call.tokenizer,
                              call.head) if call.config.report and plan.heldout_layer is not None else None
        steering = steering_of(model) or Steering(untie=plan.untied)
        with steering.applying(model, plan.edits):
            measured = method.measure(call, plan, held)
            weights = {e.module: model.base_model.get_parameter(e.module).detach() for e in plan.edits}
            config = {**call.config.to_dict(), **cfg.to_dict()}
            record = build_record(call.source, plan, measured, steering.originals, weights, config=config)
            record.method = method.name
        steering.push(model, record)  # the edits are applied: push only appends
    except BaseException:
        if plan.untied is not None and steering_of(model) is None:
            retie(model, plan.untied)
        raise
    return record


__all__ = ["Call", "Plan", "default_measure", "run"]
