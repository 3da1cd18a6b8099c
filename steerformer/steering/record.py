"""The provenance of one steering call: :class:`SteeringRecord`, enough to explain it, verify it and
undo it, and :func:`build_record`, the one place a record is filled (the lifecycle of every method
and the lazy checkpoint edit call it).

A record is a **core** every method's edits share — the model, the edits with their hashes, the
direction asked for and where it came from, the gain of the first edit, the held-out measurements
every method can take (alignment of the final states with the target, KL, state cosine), the
options, the evaluation — and the **details** its method declares in its own folder
(``Method.details``: a :class:`Details` dataclass; the paper's spectra and solve, the addition's
calibration, the ablation's writers...). No field of the core belongs to one method.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from ..version import __version__
from .common import non_finite, tensor_sha256, vector_hash
from .edit import Edit

RECORD_FORMAT = "steerformer.steering/3"


@dataclasses.dataclass
class Details:
    """What a method adds to its records: subclass it in the method's folder with JSON-able fields
    (numbers, strings, lists, dicts; None where the method did not measure a quantity). Its
    ``finite`` fields must be finite numbers when present, else the call is refused."""

    #: fields that must be finite when present
    finite: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict:
        return copy.deepcopy({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_dict(cls, data: dict) -> "Details":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def check_finite(self) -> None:
        """The non-finite error for a NaN/inf value of a ``finite`` field."""
        for n in self.finite:
            v = getattr(self, n)
            if v is not None and not math.isfinite(float(v)):
                raise non_finite(f"record.details.{n} = {v}", "record values")


@dataclasses.dataclass
class SteeringRecord:
    """One steering call: its edits (one or more low-rank edits of residual-stream writers) and what
    they were made from, measured and chosen by (module doc); ``details``: its method's own facts."""

    # the model
    model_id: str
    model_commit: str | None
    model_type: str
    dtype: str
    # what was edited: the edits, and the first one's place and weight
    method: str | None  # the registered steering method that made the edits (steering/methods/)
    layer: int  # execution layer of the first edit
    slot: int  # its weight slot (ALBERT: shared by several layers)
    module: str  # its stored weight, relative to the base model
    layers_changed: list[int]  # every execution layer that runs an edited weight
    untied: bool  # ALBERT: the last layer was given its own group first
    original_sha256: str  # stored bytes of the first edited weight, before
    steered_sha256: str  # and after
    weight_change: float  # ‖ΔW‖_F / ‖W‖_F over the edited (stored, cast) weights
    # toward what, how strongly
    direction: list  # what the call was asked to write or remove: u (d,) or k directions (k, d)
    direction_sha256: str
    direction_source: dict
    gain: float  # the first edit's gain
    message: str  # how the gain was chosen, in words
    # measured on held-out prompts (None: not measured)
    alignment_model_before: float | None
    alignment_model_after: float | None
    kl: float | None
    kl_kind: str | None
    state_cosine: float | None
    steerformer_version: str
    heldout_prompts: list[str] | None = None  # None: steerformer's default held-out set
    custom_heldout_ids: bool = False  # held-out prompts were given as token ids (not recorded)
    edits: list[Edit] = dataclasses.field(default_factory=list)
    config: dict | None = None  # the call's options and the method's (steerformer.configs)
    evaluation: dict | None = None  # held-out answers judged (steering.evaluation.evaluate), when an evaluation ran
    details: Any = None  # the method's Details (a plain dict for a method not registered here)
    format: str = RECORD_FORMAT

    def __repr__(self) -> str:  # the vectors and edits stay out: one line
        f = lambda x: "n/a" if x is None else f"{x:.4g}"  # noqa: E731
        return (f"SteeringRecord({self.method} on {self.model_id} layer {self.layer}, gain={self.gain:.6g}, "
                f"alignment {f(self.alignment_model_before)} -> {f(self.alignment_model_after)}, kl={f(self.kl)}, "
                f"{len(self.edits)} edit(s))")

    @property
    def edit(self) -> Edit:
        """The record's edit (a call that made exactly one)."""
        if len(self.edits) != 1:
            raise ValueError(f"this record holds {len(self.edits)} edits; use record.edits")
        return self.edits[0]

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("edits", "details")}
        d = copy.deepcopy(d)
        d["edits"] = [e.to_dict() for e in self.edits]
        d["details"] = self.details.to_dict() if isinstance(self.details, Details) else copy.deepcopy(self.details)
        return d

    def to_json(self, path: str | Path | None = None) -> str:
        """JSON text of :meth:`to_dict` (the one encoder: NaN as null); also written to ``path``."""
        from ..results import json_text

        return json_text(self.to_dict(), path)

    def save(self, directory: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """``record.json`` in ``directory`` (and the method's figures, ``plots``); the paths by role."""
        out = Path(directory)
        written = {"json": out / "record.json"}
        self.to_json(written["json"])
        if plots:
            written.update({p.name: p for p in self.plot(out)})
        return written

    @classmethod
    def load(cls, directory: str | Path) -> "SteeringRecord":
        """The record :meth:`save` wrote into ``directory``."""
        return cls.from_json(Path(directory) / "record.json")

    @classmethod
    def from_dict(cls, data: dict, where: Any = "the steering record") -> "SteeringRecord":
        """A record from its JSON, checked field by field first (``steerformer.schemas``: a wrong type,
        size or range is one FileFormatError line naming ``where`` and the field), its details as
        the dataclass its method declares."""
        from ..schemas import EditFile, Vector, checked, dataclass_schema
        from .registry import details_of

        # a rank-k edit stores k vectors where a rank-1 edit stores one: the vectors' fields take both
        checked(data, dataclass_schema(cls, {"edits": list[EditFile], "direction": Vector, "details": dict}), where)
        kind = details_of(data.get("method"))
        details = data.get("details")
        if kind is not None and isinstance(details, dict):
            checked(details, dataclass_schema(kind), f"{where} details")
            details = kind.from_dict(details)
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["edits"] = [Edit.from_dict(e) for e in data.get("edits") or []]
        kw["details"] = details
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str | Path) -> "SteeringRecord":
        from ..results import read_json

        return cls.from_dict(read_json(path), path)

    def summary(self) -> str:
        """A few human-readable lines (the CLI prints them), in the words of the method that made
        the record (``Method.summary_lines``)."""
        from .registry import method_of

        return "\n".join(method_of(self).summary_lines(self))

    def plot(self, directory: str | Path) -> list[Path]:
        """The figures of the record's method (``Method.plot``: the paper's gain search, none by default)."""
        from .registry import method_of

        return method_of(self).plot(self, Path(directory))


def gain_curve_figure(directory: str | Path, curve: Sequence, gain: float, ylabel: str, *,
                      target: float | None = None) -> list[Path]:
    """A gain search's curve (gain, measured value) on a log axis with the chosen gain (and a target)
    marked → ``steering_curve.png`` in ``directory``; none without a curve."""
    if not curve:
        return []
    from matplotlib.figure import Figure

    from ..results import save_figure

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(5, 3.5))
    ax = fig.add_subplot()
    g, a = zip(*sorted(curve))
    ax.semilogx([max(x, 1e-12) for x in g], a, "o-", ms=3)
    ax.axvline(gain, color="k", lw=0.8, ls="--", label=f"chosen γ = {gain:.3g}")
    if target is not None:
        ax.axhline(target, color="r", lw=0.8, ls=":", label="target")
    ax.set_xlabel("gain γ")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    return [save_figure(fig, out / "steering_curve.png")]


#: the core fields a measurement may fill (``None`` when not measured)
MEASURED = ("alignment_model_before", "alignment_model_after", "kl", "kl_kind", "state_cosine")
#: core fields that must be finite when present (else the call is refused: nothing is kept)
FINITE = ("gain", "weight_change", "alignment_model_after", "kl", "state_cosine")


def relative_change(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """‖W − W₀‖_F / ‖W₀‖_F over the (edited, original) stored weights of ``pairs``, in float64."""
    num = den = 0.0
    for new, old in pairs:
        old = old.detach().to(device=new.device, dtype=torch.float64)
        num += float(torch.linalg.norm(new.detach().to(torch.float64) - old)) ** 2
        den += float(torch.linalg.norm(old)) ** 2
    return math.sqrt(num / den) if den > 0 else 0.0


def build_record(source: Any, plan: Any, measured: dict | None, originals: dict[str, torch.Tensor],
                 weights: dict[str, torch.Tensor], *, method: str | None, config: dict | None = None,
                 heldout_prompts: Any = None) -> SteeringRecord:
    """The record of one call that made ``plan.edits`` (applied, or with their hashes set) on the model
    opened as ``source``. ``plan``: the method's :class:`~steerformer.steering.lifecycle.Plan` (the
    edits, the direction and its source, the message, the details); ``measured``: fields of
    ``MEASURED``; ``originals``: the true original of each edited weight; ``weights``: the edited
    weights as stored now; ``config``: the call's options. Refuses (the non-finite error) a record
    with a NaN/inf value, in the core or in the details' ``finite`` fields."""
    edits = plan.edits
    first = edits[0]
    direction = (first.u if plan.direction is None else plan.direction).to(torch.float64)
    slots = {e.slot for e in edits}
    adapter = source.adapter
    measured = {k: None for k in MEASURED} | dict(measured or {})
    record = SteeringRecord(
        model_id=source.model_id, model_commit=source.commit, model_type=adapter.model_type, dtype=first.dtype,
        method=method, layer=first.layer, slot=first.slot, module=first.module,
        layers_changed=[k for k, s in enumerate(adapter.layer_sequence()) if s in slots], untied=plan.untied is not None,
        original_sha256=tensor_sha256(originals[first.module]), steered_sha256=first.after_sha256,
        weight_change=relative_change([(weights[m], originals[m]) for m in dict.fromkeys(e.module for e in edits)]),
        direction=direction.tolist(), direction_sha256=vector_hash(direction), direction_source=plan.direction_source,
        gain=float(first.gain), message=plan.message, steerformer_version=__version__,
        heldout_prompts=None if heldout_prompts is None or isinstance(heldout_prompts, torch.Tensor)
        else [str(p) for p in heldout_prompts],
        custom_heldout_ids=isinstance(heldout_prompts, torch.Tensor),
        edits=list(edits), config=config, details=plan.details, **measured,
    )
    for n in FINITE:
        v = getattr(record, n)
        if v is not None and not math.isfinite(float(v)):
            raise non_finite(f"record.{n} = {v}", "record values")
    if isinstance(record.details, Details):
        record.details.check_finite()
    return record


__all__ = ["Details", "FINITE", "MEASURED", "RECORD_FORMAT", "SteeringRecord", "build_record", "gain_curve_figure",
           "relative_change"]
