"""The ablation's options (torch-free: ``steer --help`` builds its flags from them)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ....configs import MethodConfig, finite, option
from ....errors import bad_argument

#: the writers ablation may edit (``adapters.base.Writer`` kinds; "embedding" covers every embedding
#: writer: token, learned positions, token type)
ABLATION_WRITERS = ("attention", "mlp", "embedding")
#: norm-preserving ablation (steering.algebra.NORM_PRESERVING; this module imports no torch)
NORM_PRESERVING = ("rows", "columns")


def ablation_writers(value: Any) -> tuple[str, ...]:
    """The writer kinds of ``writers=`` ("attention,mlp" or a sequence), checked, in their order."""
    items = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value or [])
    bad = [p for p in items if p not in ABLATION_WRITERS]
    if not items or bad or len(set(items)) != len(items):
        raise bad_argument("writers", value, f"a comma list of distinct writers from {', '.join(ABLATION_WRITERS)}",
                           "e.g. 'attention,mlp' (what abliteration tools edit) or 'attention,mlp,embedding'.")
    return tuple(k for k in ABLATION_WRITERS if k in items)


def check_ablation_scale(scale: Any) -> None:
    """s in (0, 1], or {layer: s} (an int layer, or "embedding") with each s in (0, 1]."""
    items = scale.items() if isinstance(scale, dict) else [(None, scale)]
    if isinstance(scale, dict) and not scale:
        raise bad_argument("scale", scale, "a number in (0, 1] or a non-empty {layer: s} mapping")
    for layer, s in items:
        if layer is not None and layer != "embedding" and not str(layer).lstrip("-").isdigit():
            raise bad_argument("scale", scale, "{layer: s} with integer layers (and optionally 'embedding')")
        if isinstance(s, bool) or not finite(s) or not 0 < float(s) <= 1:
            raise bad_argument("scale", s if layer is None else scale,
                               "a number in (0, 1]: 1 removes u entirely, less removes part of it"
                               + ("" if layer is None else f" (layer {layer}: {s!r})"))


@dataclasses.dataclass
class AblationConfig(MethodConfig):
    """Directional ablation of the residual-stream writers, W' = (I − s UUᵀ) W
    (``steering/methods/ablation/``)."""

    #: it takes layers= (every layer by default) and scale=, not one layer
    refuses: ClassVar[tuple[str, ...]] = ("layer",)

    scale: float = option(1.0, "Ablation: W' = (I - s UU^T) W, s in (0, 1] (Python: also {layer: s}).")
    writers: str = option("attention", "Ablation: the writers that lose the direction(s), a comma list of "
                                       "attention, mlp, embedding.")
    bias: bool = option(False, "Ablation: also b' = (I - s UU^T) b (a LoRA adapter cannot carry it).")
    norm_preserving: str | None = option(None, "Ablation: keep each row's norm (Heretic) or each column's.",
                                         choices=NORM_PRESERVING)

    def check(self) -> None:
        check_ablation_scale(self.scale)
        self.writers = ",".join(ablation_writers(self.writers))
        if self.norm_preserving is not None and self.norm_preserving not in NORM_PRESERVING:
            raise bad_argument("norm_preserving", self.norm_preserving, f"None or one of {NORM_PRESERVING}")
