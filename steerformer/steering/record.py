"""The provenance of one steering call: :class:`SteeringRecord`, enough to explain it, verify it and
undo it, and :func:`build_record`, the one place a record is filled (``steer``, ``ablate`` and the
lazy checkpoint edit all call it)."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any, Sequence

import torch

from ..version import __version__
from .common import cosine, non_finite, tensor_sha256, vector_hash
from .edit import Edit

RECORD_FORMAT = "steerformer.steering/2"


@dataclasses.dataclass
class SteeringRecord:
    """One rank-1 edit W_O' = W_O + γ u (wᵀV⁺) of one attention layer's output weight."""

    # what was edited
    model_id: str
    model_commit: str | None
    model_type: str
    layer: int  # execution layer
    slot: int  # weight slot (ALBERT: shared by several layers)
    module: str  # stored output weight, relative to the base model
    layers_changed: list[int]  # every execution layer that runs the edited weights
    untied: bool  # ALBERT: the last layer was given its own group first
    dtype: str
    # the edit
    direction: list[float]  # u actually used by the edit (unit)
    direction_sha256: str
    direction_source: dict
    target: list[float]  # u* the alignment is measured against (= u unless through_ffn)
    left: list[float]  # w (unit)
    left_sha256: str
    gain: float  # γ
    strength: float  # γ / |λ1(F_L)|
    solve: dict  # method ("solve" | "lstsq" | "ridge"), cond_V, alpha, fit_error
    # how the gain was chosen
    measure: str | None  # "dynamics" | "model" | None (gain/strength given)
    target_alignment: float | None
    target_reached: bool | None
    message: str
    curve: list[list[float]]  # (gain, alignment) evaluated by the search
    # results
    alignment_dynamics_before: float | None
    alignment_dynamics_after: float | None
    alignment_model_before: float | None
    alignment_model_after: float | None
    weight_change: float  # ‖ΔW_O‖_F / ‖W_O‖_F of the stored (cast) weights
    spectrum_before: dict | None  # lambda1, lambda2, gap of F_L
    spectrum_after: dict | None
    kl: float | None
    kl_kind: str | None
    state_cosine: float | None
    through_ffn: dict | None
    original_sha256: str  # stored bytes of the original output weight
    steered_sha256: str  # stored bytes after the edit
    steerformer_version: str
    heldout_prompts: list[str] | None = None  # None: steerformer's default held-out set
    custom_heldout_ids: bool = False  # held-out prompts were given as token ids (not recorded)
    format: str = RECORD_FORMAT
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
    edits: list[Edit] = dataclasses.field(default_factory=list)  # the edit(s) this call applied
    config: dict | None = None  # the SteerConfig of the call (steerformer.configs)
    calibration: dict | None = None  # the KL-budget calibration (max_kl, the layer scan), when it ran
    evaluation: dict | None = None  # held-out answers judged (steering.evaluation.evaluate), when an evaluation ran
    method: str | None = None  # the registered steering method that made the edits (steering/methods/)

    def __repr__(self) -> str:  # the vectors, curve and edits stay out: one line
        def f(x):
            return "n/a" if x is None else f"{x:.4g}"
        return (f"SteeringRecord({self.solve.get('method')} on {self.model_id} layer {self.layer}, gain={self.gain:.6g}, "
                f"alignment {f(self.alignment_model_before)} -> {f(self.alignment_model_after)}, kl={f(self.kl)}, "
                f"{len(self.edits)} edit(s))")

    @property
    def edit(self) -> Edit:
        """The record's edit (steer() makes exactly one)."""
        if len(self.edits) != 1:
            raise ValueError(f"this record holds {len(self.edits)} edits; use record.edits")
        return self.edits[0]

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "edits"}
        d = copy.deepcopy(d)
        d["edits"] = [e.to_dict() for e in self.edits]
        return d

    def to_json(self, path: str | Path | None = None) -> str:
        """JSON text of :meth:`to_dict` (the one encoder: NaN as null); also written to ``path``."""
        from ..results import json_text

        return json_text(self.to_dict(), path)

    def save(self, directory: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """``record.json`` (and the gain-search figure) in ``directory``; the paths by role."""
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
        size or range is one FileFormatError line naming ``where`` and the field)."""
        from ..schemas import EditFile, Vector, checked, dataclass_schema

        # a rank-k edit stores k vectors where a rank-1 edit stores one: the vectors' fields take both
        checked(data, dataclass_schema(cls, {"edits": list[EditFile], "direction": Vector, "target": Vector,
                                             "left": Vector}), where)
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["edits"] = [Edit.from_dict(e) for e in data.get("edits") or []]
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str | Path) -> "SteeringRecord":
        from ..results import read_json

        return cls.from_dict(read_json(path), path)

    def summary(self) -> str:
        """A few human-readable lines (the CLI prints them), in the words of the method that made
        the record (``Method.summary_lines``)."""
        from .methods.registry import method_of

        return "\n".join(method_of(self).summary_lines(self))

    def plot(self, directory: str | Path) -> list[Path]:
        """The alignment-vs-gain curve of the search (if any) → ``steering_curve.png``."""
        from matplotlib.figure import Figure

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if not self.curve:
            return []
        fig = Figure(figsize=(5, 3.5))
        ax = fig.add_subplot()
        g, a = zip(*sorted(self.curve))
        ax.semilogx([max(x, 1e-12) for x in g], a, "o-", ms=3)
        ax.axvline(self.gain, color="k", lw=0.8, ls="--", label=f"chosen γ = {self.gain:.3g}")
        if self.target_alignment is not None:
            ax.axhline(self.target_alignment, color="r", lw=0.8, ls=":", label="target")
        ax.set_xlabel("gain γ")
        ax.set_ylabel(f"mean alignment ({self.measure})")
        ax.legend(fontsize=8)
        from ..results import save_figure

        return [save_figure(fig, out / "steering_curve.png")]


#: the measurements a call may report (``None`` when not measured), by record field
MEASURED = ("alignment_dynamics_before", "alignment_dynamics_after", "alignment_model_before",
            "alignment_model_after", "spectrum_after", "kl", "kl_kind", "state_cosine",
            "signed_alignment_model_before", "signed_alignment_model_after", "predicted_u_shift")
#: record fields that must be finite when present (else the call is refused: nothing is kept)
FINITE = ("gain", "strength", "weight_change", "alignment_dynamics_after", "alignment_model_after", "kl",
          "state_cosine", "w_eff_cos", "effective_strength", "bias_shift_norm")


def relative_change(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """‖W − W₀‖_F / ‖W₀‖_F over the (edited, original) stored weights of ``pairs``, in float64."""
    num = den = 0.0
    for new, old in pairs:
        old = old.detach().to(device=new.device, dtype=torch.float64)
        num += float(torch.linalg.norm(new.detach().to(torch.float64) - old)) ** 2
        den += float(torch.linalg.norm(old)) ** 2
    return math.sqrt(num / den) if den > 0 else 0.0


def build_record(source: Any, plan: Any, measured: dict | None, originals: dict[str, torch.Tensor],
                 weights: dict[str, torch.Tensor], *, config: dict | None = None) -> SteeringRecord:
    """The record of one call that made ``plan.edits`` (applied, or with their hashes set) on the model
    opened as ``source``. ``plan``: the method's :class:`~steerformer.steering.lifecycle.Plan` (the
    edits, the direction's source, the gain search, the calibration); ``measured``: fields of
    ``MEASURED``; ``originals``: the true original of each edited weight; ``weights``: the edited
    weights as stored now; ``config``: the call's options. Refuses (the non-finite error) a record
    with a NaN/inf value."""
    edits, direction, target, choice = plan.edits, plan.direction, plan.target, plan.choice
    abs_lambda1, heldout_prompts = plan.abs_lambda1, plan.heldout_prompts
    first = edits[0]
    u = (first.u if direction is None else direction).to(torch.float64)
    target = u if target is None else target.to(torch.float64)
    w = u if first.w is None else first.w.to(torch.float64)  # ablation writes along u itself
    # a steering edit through V (F' = F + γ u w_effᵀ) records its effective left vector; a plain
    # low-rank edit (no w_eff) and an ablation do not
    through_v = first.kind == "steer" and first.w_eff is not None
    slots = {e.slot for e in edits}
    adapter = source.adapter
    measured = {k: None for k in MEASURED} | dict(measured or {})
    side = [measured.get(k) for k in ("predicted_u_shift", "signed_alignment_model_before", "signed_alignment_model_after")]
    sign_disagreement = None if None in side else bool(side[0] * (side[2] - side[1]) < 0)
    record = SteeringRecord(
        model_id=source.model_id, model_commit=source.commit, model_type=adapter.model_type,
        layer=first.layer, slot=first.slot, module=first.module,
        layers_changed=[k for k, s in enumerate(adapter.layer_sequence()) if s in slots], untied=plan.untied is not None,
        dtype=first.dtype,
        direction=u.tolist(), direction_sha256=vector_hash(u), direction_source=plan.direction_source,
        target=target.tolist(), left=w.tolist(), left_sha256=vector_hash(w),
        gain=float(first.gain), strength=float(first.gain) / abs_lambda1 if abs_lambda1 else None,
        solve=dict(first.solve),
        measure=plan.measure if choice is not None else None,
        target_alignment=float(plan.target_alignment) if choice is not None and plan.target_alignment is not None
        else None,
        target_reached=choice.reached if choice is not None else None,
        message=choice.message if choice is not None else plan.message,
        curve=[list(p) for p in choice.curve] if choice is not None else [],
        weight_change=relative_change([(weights[m], originals[m]) for m in dict.fromkeys(e.module for e in edits)]),
        spectrum_before=plan.spectrum_before, through_ffn=plan.through_ffn,
        original_sha256=tensor_sha256(originals[first.module]), steered_sha256=first.after_sha256,
        steerformer_version=__version__,
        heldout_prompts=None if heldout_prompts is None or isinstance(heldout_prompts, torch.Tensor)
        else [str(p) for p in heldout_prompts],
        custom_heldout_ids=isinstance(heldout_prompts, torch.Tensor),
        w_eff_cos=cosine(first.w_eff, w) if through_v else None,
        effective_strength=abs(float(first.gain)) * abs(float(first.w_eff.to(torch.float64) @ u)) / abs_lambda1
        if through_v and abs_lambda1 else None,
        bias_shift_norm=first.bias_shift_norm if through_v else None, compensate_bias=bool(first.compensate_bias),
        edits=list(edits), config=config, calibration=plan.calibration, sign_disagreement=sign_disagreement, **measured,
    )
    for n in FINITE:
        v = getattr(record, n)
        if v is not None and not math.isfinite(float(v)):
            raise non_finite(f"record.{n} = {v}", "record values")
    if record.spectrum_after is not None and not all(math.isfinite(float(x)) for x in record.spectrum_after["lambda1"]):
        raise non_finite("record.spectrum_after", "record values")
    return record
