"""The chain of a steered model: :class:`Steering`, its ordered records (each with its edits) and
the true original weights; push, pop, undo, replay, and ALBERT's untie. (Stable API: :class:`Steering`,
the state of a steered model, each of its fields and methods documented where defined.)

Where the state lives: a typed :class:`Steering` object in the model attribute ``_steerformer``
(``steering_of(model)`` reads it). An attribute, not a registry keyed by the model object: it follows
the model through ``copy.deepcopy`` / ``torch.save`` together with the weights it describes (a
registry keyed by identity would make a deep copy look unsteered while its weights are steered),
and it needs no weak-reference bookkeeping.

ALBERT runs layer i with group ⌊i / (L / G)⌋ (docs/math.md §1). The only value of G for which that
arithmetic gives the last layer a group of its own is G = L, so :func:`untie` copies each layer's
shared group into its own slot (the checkpoint grows by (L − 1)/G group copies) and sets
``num_hidden_groups = L``: plain transformers loads it as an ordinary ALBERT. :func:`retie` undoes it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any, Iterator

import torch

from ..errors import SteerformerError, bad_argument
from .common import transformer_of
from .edit import Edit, check_materialized

STATE_ATTR = "_steerformer"


@dataclasses.dataclass
class Steering:
    """The ordered steering records (each with its edits) of one model, and the true originals."""

    #: list[SteeringRecord], one per steer()/ablate() call, in order (record.edits: its edits)
    records: list = dataclasses.field(default_factory=list)
    #: the TRUE original stored tensor of every touched weight (saved apart from to_dict(), as safetensors)
    originals: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict, repr=False)
    untie: dict | None = None  # ALBERT untie info (``retie`` needs it)

    def __repr__(self) -> str:
        calls = ", ".join(f"{r.edits[0].kind if r.edits else '?'} layer {r.layer}" for r in self.records)
        return (f"Steering({len(self.records)} call(s): [{calls}], {len(self.edits)} edit(s) of "
                f"{len(self.modules())} weight(s){', untied' if self.untie else ''})")

    @property
    def edits(self) -> list[Edit]:
        """All edits, in application order (the records' flattened)."""
        return [e for r in self.records for e in r.edits]

    def modules(self) -> list[str]:
        """The touched weights (the biases edits change excluded), in order."""
        return list(dict.fromkeys(e.module for e in self.edits))

    def edits_of(self, module: str) -> list[Edit]:
        return [e for e in self.edits if e.module == module]

    def factors(self, module: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, A), float64, with B @ A = Σ_i γ_i U_i A_i over the edits of ``module`` (rank = the
        sum of the edits' ranks). W' − W when every edit :attr:`~.edit.Edit.is_low_rank`."""
        es = self.edits_of(module)
        if not es:
            raise KeyError(f"no edit of {module!r}")
        B = torch.cat([float(e.gain) * e.u.to(torch.float64).reshape(e.u.shape[0], -1) for e in es], dim=1)
        A = torch.cat([e.a.to(torch.float64).reshape(-1, e.a.shape[-1]) for e in es], dim=0)
        return B, A

    def _forget_unused(self) -> None:
        used = {e.module for e in self.edits} | {e.bias_module for e in self.edits if e.changes_bias}
        for name in list(self.originals):
            if name not in used:
                del self.originals[name]

    @contextlib.contextmanager
    def applying(self, model: Any, edits: list[Edit]) -> Iterator[None]:
        """Apply ``edits`` in order (those not applied yet), each checked finite, then run the block
        (measurements, the record): if anything raises, the edits applied here are removed last
        first, bit for bit, and the model is as it was."""
        for e in edits:  # the TRUE originals: kept from the first edit on
            for name in (e.module, e.bias_module if e.changes_bias else None):
                if name is not None and name not in self.originals:
                    self.originals[name] = model.base_model.get_parameter(name).detach().clone()
        applied: list[Edit] = []
        try:
            for e in edits:
                if not e.is_applied:
                    e.apply(model, check=False)
                    applied.append(e)
                e.check_finite(model)
            yield
        except BaseException:
            for e in reversed(applied):
                e.remove(model, check=False)
            self._forget_unused()
            raise

    def push(self, model: Any, record: Any) -> None:
        """Apply ``record.edits`` (those not applied yet), append the record and attach this chain to
        ``model``; on failure nothing stays applied."""
        with self.applying(model, record.edits):
            pass
        self.records.append(record)
        setattr(model, STATE_ATTR, self)

    def pop(self, model: Any, k: int = 1) -> list:
        """Remove the last ``k`` records' edits (last first), bit for bit; returns those records."""
        k = min(int(k), len(self.records))
        removed = self.records[len(self.records) - k:] if k > 0 else []
        for r in reversed(removed):
            for e in reversed(r.edits):
                e.remove(model)
        del self.records[len(self.records) - k:]
        self._forget_unused()
        return removed

    def to_dict(self) -> dict:
        return {"records": [r.to_dict() for r in self.records], "untie": self.untie}


def steering_of(model: Any) -> Steering | None:
    """The :class:`Steering` of ``model`` (None when it is not steered); a ``SentenceTransformer``'s
    is its transformer's."""
    s = getattr(transformer_of(model), STATE_ATTR, None)
    return s if isinstance(s, Steering) else None


def is_steered(model: Any) -> bool:
    """Whether ``model`` carries steering edits (made in this session or re-attached on load)."""
    return steering_of(model) is not None


def steering_records(model: Any) -> list:
    """The records (:class:`~steerformer.steering.record.SteeringRecord`) of the steering edits
    applied to ``model``, oldest first (empty when unsteered)."""
    s = steering_of(model)
    return [] if s is None else list(s.records)


def replay(model: Any, steering: Steering) -> None:
    """Re-attach a chain read from disk to ``model``, whose weights are the chain's result: put the
    originals in, re-apply every edit checking each recorded hash, and end on bytes identical to the
    ones loaded (else the model is left as loaded and an error says which weight differs)."""
    base = model.base_model
    loaded = {name: base.get_parameter(name).detach().clone() for name in steering.originals}
    try:
        with torch.no_grad():
            for name, t in steering.originals.items():
                p = check_materialized(model, name, -1)
                if tuple(p.shape) != tuple(t.shape):
                    raise SteerformerError(f"original {name} has shape {tuple(t.shape)} but the model's is "
                                           f"{tuple(p.shape)}")
                if p.dtype != t.dtype:
                    raise SteerformerError(f"{name}: the model holds it as {p.dtype} but the original is {t.dtype}; "
                                           "load the checkpoint in its stored dtype to unsteer it")
                p.copy_(t.to(p.device))
        for e in steering.edits:
            e.apply(model, check=True)
        for name, t in loaded.items():
            if not torch.equal(base.get_parameter(name).detach(), t):
                raise SteerformerError(f"{name}: the loaded weights are not the result of the recorded edits")
    except BaseException:
        for e in steering.edits:
            e.release()
        with torch.no_grad():
            for name, t in loaded.items():
                base.get_parameter(name).copy_(t)
        raise
    setattr(model, STATE_ATTR, steering)


def check_last(last: int | None, n: int) -> None:
    """``last`` steering calls to remove from a chain of ``n``: None (all) or 1 … n — more than the
    chain holds is refused, not read as "all" (the model or the count is then not what was meant)."""
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= n):
        raise bad_argument("last", last, f"a whole number from 1 to {n} (the chain holds {n} steering call"
                           f"{'s' if n != 1 else ''})", "Leave it out to remove every steering call.")


def unsteer(model: Any, *, last: int | None = None) -> Any:
    """Undo steering bit for bit; returns ``model``. ``last=None``: every edit (the true original
    weights, and ALBERT's shared groups, come back); ``last=k``: only the last k ``steer`` calls.
    A ``SentenceTransformer`` is unsteered through its transformer."""
    returned, model = model, transformer_of(model)
    steering = steering_of(model)
    if steering is None:
        raise SteerformerError(f"{type(model).__name__} has not been steered by steerformer "
                               "(for a saved checkpoint load it with steerformer.load_model(dir), or use "
                               "steerformer.steering.unsteer_checkpoint(dir)).")
    check_last(last, len(steering.records))
    if last is not None and last < len(steering.records):
        steering.pop(model, last)
        return returned
    base = model.base_model
    with torch.no_grad():
        for name, original in steering.originals.items():
            base.get_parameter(name).copy_(original)
    for e in steering.edits:
        e.release()
    if steering.untie:
        retie(model, steering.untie)
    delattr(model, STATE_ATTR)
    return returned


# ---- ALBERT: untie the last layer ----------------------------------------------------------------
def group_of_layer(config: Any) -> list[int]:
    L, G = int(config.num_hidden_layers), int(config.num_hidden_groups)
    return [int(i / (L / G)) for i in range(L)]


def untie(model: Any) -> dict:
    """Copy the shared groups so layer i runs group i; returns what :func:`retie` needs."""
    cfg = model.config
    groups = group_of_layer(cfg)
    info = {"num_hidden_groups": int(cfg.num_hidden_groups), "group_of_layer": groups}
    encoder = model.base_model.encoder
    encoder.albert_layer_groups = torch.nn.ModuleList(copy.deepcopy(encoder.albert_layer_groups[g]) for g in groups)
    cfg.num_hidden_groups = int(cfg.num_hidden_layers)
    return info


def retie(model: Any, info: dict) -> None:
    """Back to the original groups: group g is the copy held by the first layer that ran it."""
    first = [info["group_of_layer"].index(g) for g in range(int(info["num_hidden_groups"]))]
    encoder = model.base_model.encoder
    encoder.albert_layer_groups = torch.nn.ModuleList(encoder.albert_layer_groups[i] for i in first)
    model.config.num_hidden_groups = int(info["num_hidden_groups"])
