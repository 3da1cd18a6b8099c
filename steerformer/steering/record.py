"""The provenance of one edit: enough to explain it, verify it and undo it."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from .edits import Edit

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
    # honest reporting (MATH.md §5b): the left vector actually applied and what it means
    w_eff_cos: float | None = None  # cos(w_eff, w), w_eff = Vᵀaᵀ (1 for an exact solve of a regular V)
    effective_strength: float | None = None  # γ |w_effᵀu| / |λ1|: comparable with the paper's s
    bias_shift_norm: float | None = None  # ‖γ (a·b_V) u‖: shift of every token's attention output
    compensate_bias: bool = False  # the shift was removed through b_O
    edits: list[Edit] = dataclasses.field(default_factory=list)  # the edit(s) this call applied
    config: dict | None = None  # the SteerConfig of the call (steerformer.configs)

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
    def from_dict(cls, data: dict) -> "SteeringRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["edits"] = [Edit.from_dict(e) for e in data.get("edits") or []]
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str | Path) -> "SteeringRecord":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def summary(self) -> str:
        """A few human-readable lines (the CLI prints them)."""
        f = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
        g = lambda x: "n/a" if x is None else f"{x:.4g}"  # noqa: E731
        if self.solve.get("method") == "ablate":  # one edit per ablated weight (ablate.py)
            lines = [f"ablated layers {self.layers_changed} ({len(self.edits)} weight(s)): W_O' = (I - {-self.gain:g} uu^T) W_O",
                     f"alignment, real model final states: {f(self.alignment_model_before)} -> "
                     f"{f(self.alignment_model_after)}",
                     f"weight change |dW_O|/|W_O| = {self.weight_change:.4g}; KL ({self.kl_kind}) = {f(self.kl)}; "
                     f"state cosine = {f(self.state_cosine)}"]
            return "\n".join(lines)
        lines = [
            f"layer {self.layer} ({self.module}), solve {self.solve['method']} (cond V = {self.solve['cond_V']:.3g})",
            f"gain {self.gain:.6g} = strength {g(self.strength)} x |lambda1| (nominal); effective strength "
            f"{g(self.effective_strength)} = gain |w_eff.u| / |lambda1|, cos(w_eff, w) = {f(self.w_eff_cos)}",
            f"alignment, controlled dynamics: {f(self.alignment_dynamics_before)} -> {f(self.alignment_dynamics_after)}",
            f"alignment, real model final states: {f(self.alignment_model_before)} -> {f(self.alignment_model_after)}",
            f"weight change |dW_O|/|W_O| = {self.weight_change:.4g}; KL ({self.kl_kind}) = {f(self.kl)}; "
            f"state cosine = {f(self.state_cosine)}",
        ]
        if self.spectrum_before and self.spectrum_after:
            lines.append(f"lambda1 {self.spectrum_before['lambda1'][0]:.4g} -> {self.spectrum_after['lambda1'][0]:.4g}, "
                         f"gap {self.spectrum_before['gap']:.4g} -> {self.spectrum_after['gap']:.4g}")
        if self.bias_shift_norm is not None:
            lines.append(f"bias shift |gain (a.b_V) u| = {self.bias_shift_norm:.4g} on every token's attention output"
                         + (" (compensated through b_O)" if self.compensate_bias else ""))
        if len(self.layers_changed) > 1:
            lines.append(f"shared weights: layers {self.layers_changed} all changed")
        if self.message:
            lines.append(self.message)
        return "\n".join(lines)

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

