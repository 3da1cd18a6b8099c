"""The steering edit as a value: :class:`Edit`, one low-rank change of one stored weight of a
residual-stream writer (the attention output, the MLP's output projection, an embedding —
``adapters.base.Writer``), and optionally of its bias. The ordered edits of one model, with its
true original weights, are a :class:`~steerformer.steering.chain.Steering` (``chain.py``).

Stable API (other modules — LoRA export, ablation, activation addition — build on it):

``Edit``  W' = diag(r) W diag(c) + γ Σ_k u_k a_k  (and b' = b + δ), on one writer's weight W
          in the canonical layout (d_model × in, docs/math.md §5, §5b, §5e); r, c and δ optional
    module: str            stored weight, relative to ``model.base_model``
    layer, slot: int       execution layer / weight slot (ALBERT: one slot runs several layers;
                           -1 for an embedding)
    u: Tensor (out,) | (out, k)   float64, the written direction(s), one column per rank
    a: Tensor (in,) | (k, in)     float64, the row vector(s) (a = wᵀV⁺ for steering, uᵀW for ablation)
    gain: float            γ (any sign; negative steers away)
    kind: str              what the change does to the residual stream: "steer" (γ u (a·z), a rank-1 write
                           through V), "add" (a fixed vector after the block: γ u, a·z ≈ 1, or the bias),
                           "ablate" (removes directions), "lora" (a token-dependent low-rank change)
    writer: str            which writer: "attention" | "mlp" | "embedding" | "positions" | "token_type"
    index: int | None      the expert, for a stacked (experts, out, in) weight (mixture of experts)
    row_scale: Tensor|None (out,) r: each output row of W scaled (norm-preserving ablation, rows)
    col_scale: Tensor|None (in,)  c: each input column of W scaled (norm-preserving ablation, columns)
    bias_delta: Tensor|None (out,) δ added to ``bias_module`` with the weight (and undone with it)
    solve: dict            how a was obtained (method, cond_V, alpha, fit_error; ablation details) — may be {}
    w: Tensor | None       the intended left vector (steering)
    w_eff: Tensor | None   the left vector actually applied, Vᵀaᵀ (F' = F + γ u w_effᵀ)
    bias_coef: float|None  a·b_V: the edit adds γ (a·b_V) u to every token's attention output
    bias_module: str|None  the writer's bias, when the edit changes it (compensate_bias, bias_delta)
    compensate_bias: bool  b_O −= γ (a·b_V) u is applied with the weight (and undone with it)
    transposed: bool       the stored tensor is Wᵀ (GPT-2 ``Conv1D``, ``nn.Embedding``)
    dtype, device: str     the stored weight's dtype / device when applied
    shape: list[int]       stored shape
    before_sha256, after_sha256            stored bytes of the weight before / after this edit
    bias_before_sha256, bias_after_sha256  same for the bias (when the edit changes it)

    (its properties and methods — rank, delta(), apply(model) / remove(model), scaled(factor), to_dict() /
    Edit.from_dict(d) ... — each say what they give)

All arithmetic is float64 on the stored weight's device (CPU when that device has no float64,
e.g. MPS, then moved once), cast back to the stored dtype, and elementwise: each entry is
r_i·W_ij·c_j plus the k outer-product terms added in order, never a matrix product whose summation
order a backend may choose. Elementwise float64 products and sums are IEEE-exact, so an edit
replayed from its record gives the same bytes on any device: that is how a chain loaded from disk
is re-attached and verified (``replay``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..errors import SteerformerError
from . import algebra
from .common import non_finite, tensor_sha256, work_device

#: /2 added writer, index, row_scale, col_scale, bias_delta and rank-k u/a; /1 records read as before
EDIT_FORMAT = "steerformer.edit/2"


def check_materialized(model: Any, module: str, layer: int) -> torch.nn.Parameter:
    """The parameter ``module`` of the base model; a clear error when it is offloaded (meta device)."""
    base = model.base_model
    try:
        p = base.get_parameter(module)
    except AttributeError:
        raise SteerformerError(f"{type(model).__name__} has no weight {module!r} (layer {layer}): "
                               "the edit was made for another architecture.") from None
    if p.device.type == "meta":
        raise SteerformerError(
            f"layer {layer}: weight {module} is offloaded (on the meta device, e.g. device_map with disk "
            "offload), so it cannot be edited in place. Load the model without offloading (no device_map, "
            "or a device_map that keeps this layer on a real device) and steer again.")
    return p


def check_layer_materialized(model: Any, adapter: Any, layer: int, slot: int) -> None:
    """Offloaded weights (device_map with disk/CPU offload) sit on the meta device: name the layer."""
    attn = adapter.slots()[slot]
    for n, p in model.base_model.get_submodule(attn).named_parameters():
        if p.device.type == "meta":
            check_materialized(model, f"{attn}.{n}", layer)
    check_materialized(model, adapter.output_weight_name(slot), layer)


def edited_stored(stored: torch.Tensor, u: torch.Tensor, a: torch.Tensor, gain: float, *, transposed: bool,
                  dtype: torch.dtype | None = None, row_scale: torch.Tensor | None = None,
                  col_scale: torch.Tensor | None = None, index: int | None = None) -> torch.Tensor:
    """The stored weight after W' = diag(r) W diag(c) + γ u a (``index``: only that expert's slice of
    a stacked weight): float64 on the weight's device, cast to ``dtype`` (default the stored dtype).
    Differentiable in ``u`` (the FFN pre-compensation uses that)."""
    work = work_device(stored.device)
    full = stored.detach().to(device=work, dtype=torch.float64)
    W = full if index is None else full[index]
    W = W.T if transposed else W  # canonical (out, in): a view
    if row_scale is not None:
        W = W * row_scale.to(device=work, dtype=torch.float64)[:, None]
    if col_scale is not None:
        W = W * col_scale.to(device=work, dtype=torch.float64)[None, :]
    new = W + algebra.delta_output(u.to(work), a.to(work), gain)
    new = new.T if transposed else new
    if index is not None:
        full = full.clone()
        full[index] = new
        new = full
    return new.to(dtype or stored.dtype).contiguous()


def _vec(t: torch.Tensor | None):
    """A tensor as nested lists of floats (float64), for JSON; None stays None."""
    return None if t is None else t.detach().to(torch.float64).cpu().tolist()


@dataclasses.dataclass(eq=False)
class Edit:
    """One low-rank edit of one stored writer weight (see the module docstring for the fields).
    Two edits are equal when their :meth:`to_dict` are (tensors compared by value)."""

    module: str
    layer: int
    slot: int
    u: torch.Tensor
    a: torch.Tensor
    gain: float
    kind: str = "steer"
    solve: dict = dataclasses.field(default_factory=dict)
    w: torch.Tensor | None = None
    w_eff: torch.Tensor | None = None
    bias_coef: float | None = None
    bias_module: str | None = None
    compensate_bias: bool = False
    transposed: bool = False
    dtype: str = ""
    device: str = ""
    shape: list[int] = dataclasses.field(default_factory=list)
    before_sha256: str = ""
    after_sha256: str = ""
    bias_before_sha256: str | None = None
    bias_after_sha256: str | None = None
    writer: str = "attention"
    index: int | None = None
    row_scale: torch.Tensor | None = None
    col_scale: torch.Tensor | None = None
    bias_delta: torch.Tensor | None = None
    _before: torch.Tensor | None = dataclasses.field(default=None, repr=False, compare=False)
    _bias_before: torch.Tensor | None = dataclasses.field(default=None, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Edit) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:  # the vectors stay out: one line, not thousands of numbers
        where = f"layer {self.layer}" if self.layer >= 0 else self.writer
        expert = "" if self.index is None else f" expert {self.index}"
        return (f"Edit({self.kind} {self.module}{expert} ({where}), gain={self.gain:.6g}, "
                f"d={self.u.shape[0]}{f', rank {self.rank}' if self.rank > 1 else ''}"
                f"{', norm-preserving' if not self.is_low_rank else ''}"
                f"{', bias compensated' if self.compensate_bias else ''}"
                f"{', bias changed' if self.bias_delta is not None else ''}"
                f"{', applied' if self.is_applied else ''})")

    __hash__ = None  # mutable value

    # ---- values ----------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """k: the number of (u, a) pairs."""
        return 1 if self.u.ndim == 1 else int(self.u.shape[1])

    @property
    def is_low_rank(self) -> bool:
        """W' − W = γ U A exactly (no row or column scale): an exact rank-k LoRA."""
        return self.row_scale is None and self.col_scale is None

    @property
    def adds_vector(self) -> bool:
        """The edit adds one fixed vector after its block, whatever the token (``common.added_vector``):
        what a llama.cpp control vector can carry."""
        return self.kind == "add"

    @property
    def changes_bias(self) -> bool:
        """The edit changes ``bias_module``."""
        return self.compensate_bias or self.bias_delta is not None

    def delta(self) -> torch.Tensor:
        """γ Σ_k u_k a_k, (out, in), float64, canonical column convention: W' − W when
        :attr:`is_low_rank`."""
        return algebra.delta_output(self.u, self.a, self.gain)

    def stored_delta(self) -> torch.Tensor:
        """:meth:`delta` in the stored layout (transposed for Conv1D)."""
        D = self.delta()
        return D.T if self.transposed else D

    def bias_shift(self) -> torch.Tensor | None:
        """γ (a·b_V) u: what the edit adds to every token's attention output (None without b_V)."""
        if self.bias_coef is None:
            return None
        return (float(self.gain) * float(self.bias_coef)) * self.u.to(torch.float64)

    @property
    def bias_shift_norm(self) -> float | None:
        s = self.bias_shift()
        return None if s is None else float(torch.linalg.vector_norm(s))

    def bias_change(self) -> torch.Tensor | None:
        """What the edit adds to its bias: δ, or −γ (a·b_V) u when compensating; None if it changes none."""
        if self.bias_delta is not None:
            return self.bias_delta.to(torch.float64)
        return -self.bias_shift() if self.compensate_bias else None

    @property
    def is_applied(self) -> bool:
        return self._before is not None

    # ---- apply / remove --------------------------------------------------------------------------
    def applied_weight(self, current: torch.Tensor) -> torch.Tensor:
        """The stored weight this edit turns ``current`` into (no model touched)."""
        return edited_stored(current, self.u, self.a, self.gain, transposed=self.transposed, row_scale=self.row_scale,
                             col_scale=self.col_scale, index=self.index)

    def applied_bias(self, current: torch.Tensor) -> torch.Tensor:
        work = work_device(current.device)
        b = current.detach().to(device=work, dtype=torch.float64)
        if self.bias_delta is not None:
            return (b + self.bias_delta.to(device=work, dtype=torch.float64)).to(current.dtype)
        return (b - self.bias_shift().to(work)).to(current.dtype)

    def apply(self, model: Any, *, check: bool = True) -> "Edit":
        """Edit ``model`` in place; keeps the replaced stored tensor(s) for :meth:`remove`. With
        ``check`` the weight must hold the bytes recorded in ``before_sha256`` (when recorded)."""
        if self._before is not None:
            raise SteerformerError(f"this edit of {self.module} is already applied (remove it first)")
        base = model.base_model
        p = check_materialized(model, self.module, self.layer)
        if check and self.before_sha256 and tensor_sha256(p) != self.before_sha256:
            raise SteerformerError(f"{self.module} does not hold the weights this edit was made for (its sha256 "
                                   "differs from the recorded before_sha256): apply the edits in their order.")
        before = p.detach().clone()
        new = self.applied_weight(before).to(p.device)
        bias_before = bias_new = None
        if self.changes_bias:
            if self.bias_module is None or (self.compensate_bias and self.bias_coef is None):
                raise SteerformerError(f"the edit of {self.module} changes a bias but names none "
                                       "(compensate_bias needs an output bias and a value bias)")
            bp = check_materialized(model, self.bias_module, self.layer)
            bias_before = bp.detach().clone()
            bias_new = self.applied_bias(bias_before).to(bp.device)
        with torch.no_grad():
            p.copy_(new)
            if bias_new is not None:
                base.get_parameter(self.bias_module).copy_(bias_new)
        self._before, self._bias_before = before, bias_before
        self.dtype, self.device, self.shape = str(p.dtype).replace("torch.", ""), str(p.device), list(p.shape)
        if not self.before_sha256:
            self.before_sha256 = tensor_sha256(before)
        got = tensor_sha256(new)
        got_bias = tensor_sha256(bias_new) if bias_new is not None else None
        if check and ((self.after_sha256 and got != self.after_sha256)
                      or (got_bias is not None and self.bias_after_sha256 and got_bias != self.bias_after_sha256)):
            self.remove(model, check=False)
            raise SteerformerError(f"replaying the edit of {self.module} does not give the recorded weights "
                                   "(after_sha256 differs): the record or the original weights were changed.")
        self.after_sha256 = got
        if bias_new is not None:
            self.bias_before_sha256 = self.bias_before_sha256 or tensor_sha256(bias_before)
            self.bias_after_sha256 = got_bias
        return self

    def remove(self, model: Any, *, check: bool = True) -> "Edit":
        """Put back the stored tensor(s) :meth:`apply` replaced, bit for bit. With ``check`` the weight
        must still hold this edit's result (edits are removed last-in, first-out)."""
        if self._before is None:
            raise SteerformerError(f"this edit of {self.module} is not applied to a model in this session")
        base = model.base_model
        p = base.get_parameter(self.module)
        if check and tensor_sha256(p) != self.after_sha256:
            raise SteerformerError(f"{self.module} was changed after this edit (sha256 differs from after_sha256): "
                                   "remove later edits first, or the weight was modified outside steerformer.")
        with torch.no_grad():
            p.copy_(self._before.to(p.device))
            if self._bias_before is not None:
                bp = base.get_parameter(self.bias_module)
                bp.copy_(self._bias_before.to(bp.device))
        self._before = self._bias_before = None
        return self

    def scaled(self, factor: float) -> "Edit":
        """A new, unapplied copy of this edit at ``factor`` times its strength: γ → factor·γ and
        δ → factor·δ (the row and column scales of a norm-preserving ablation are no strength and
        are refused); its ``after_sha256`` is cleared (other bytes), its ``before_sha256`` kept."""
        if not self.is_low_rank:
            raise SteerformerError(f"the edit of {self.module} scales rows or columns (a norm-preserving ablation): "
                                   "it has no strength to scale")
        return dataclasses.replace(self, gain=self.gain * float(factor),
                                   bias_delta=None if self.bias_delta is None else self.bias_delta * float(factor),
                                   after_sha256="", bias_after_sha256=None, _before=None, _bias_before=None)

    def release(self) -> "Edit":
        """Forget the stored tensor(s) :meth:`apply` kept, touching no model: the weights were put
        back another way (a full unsteer copies the true originals in)."""
        self._before = self._bias_before = None
        return self

    def check_finite(self, model: Any) -> None:
        """The edited weight (and the bias when changed) holds no NaN/inf, else the non-finite error."""
        for n in (self.module, self.bias_module if self.changes_bias else None):
            if n is not None and not bool(torch.isfinite(model.base_model.get_parameter(n)).all()):
                raise non_finite(f"gain {self.gain:.6g}", f"weights in {n}")

    # ---- serialization ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {
            "format": EDIT_FORMAT, "module": self.module, "layer": int(self.layer), "slot": int(self.slot),
            "kind": self.kind, "gain": float(self.gain), "u": _vec(self.u), "a": _vec(self.a), "w": _vec(self.w),
            "w_eff": _vec(self.w_eff), "solve": dict(self.solve),
            "bias_coef": None if self.bias_coef is None else float(self.bias_coef),
            "bias_module": self.bias_module, "compensate_bias": bool(self.compensate_bias),
            "transposed": bool(self.transposed), "dtype": self.dtype, "device": self.device, "shape": list(self.shape),
            "before_sha256": self.before_sha256, "after_sha256": self.after_sha256,
            "bias_before_sha256": self.bias_before_sha256, "bias_after_sha256": self.bias_after_sha256,
            "writer": self.writer, "index": self.index,
        }
        for name in ("row_scale", "col_scale", "bias_delta"):  # only when set: /1 readers see the /1 keys
            if getattr(self, name) is not None:
                d[name] = _vec(getattr(self, name))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Edit":
        def vec(x):
            return None if x is None else torch.tensor(x, dtype=torch.float64)

        missing = [k for k in ("module", "layer", "slot", "u", "a", "gain") if k not in d]
        if missing:
            raise KeyError(f"edit is missing field(s) {missing}")
        return cls(
            module=str(d["module"]), layer=int(d["layer"]), slot=int(d["slot"]), u=vec(d["u"]), a=vec(d["a"]),
            gain=float(d["gain"]), kind=str(d.get("kind", "steer")), solve=dict(d.get("solve") or {}),
            w=vec(d.get("w")), w_eff=vec(d.get("w_eff")), bias_coef=d.get("bias_coef"),
            bias_module=d.get("bias_module"), compensate_bias=bool(d.get("compensate_bias", False)),
            transposed=bool(d.get("transposed", False)), dtype=str(d.get("dtype", "")),
            device=str(d.get("device", "")), shape=list(d.get("shape") or []),
            before_sha256=str(d.get("before_sha256", "")), after_sha256=str(d.get("after_sha256", "")),
            bias_before_sha256=d.get("bias_before_sha256"), bias_after_sha256=d.get("bias_after_sha256"),
            writer=str(d.get("writer", "attention")), index=None if d.get("index") is None else int(d["index"]),
            row_scale=vec(d.get("row_scale")), col_scale=vec(d.get("col_scale")), bias_delta=vec(d.get("bias_delta")),
        )
