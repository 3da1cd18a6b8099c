"""How attention scores see positions, run through the model's own modules (docs/math.md §1b).

Rotary: q_i = R(i)(W_Q x_i + b_Q), k_j = R(j)(W_K x_j + b_K) with cos/sin for positions 0..n−1
from the family's own rotary embedding module (theta, scaling, partial rotary dimension all live
there) and its own ``apply_rotary_pos_emb`` (rotate-half or interleaved pairs). Nothing is
re-derived here; this file only finds those two objects and calls them.
"""

from __future__ import annotations

import inspect
import sys
from types import ModuleType
from typing import Any

import torch


def modeling_module(config) -> ModuleType:
    """The ``modeling_<family>.py`` module that defines the base model class of ``config``."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    return sys.modules[MODEL_MAPPING[type(config)].__module__]


def family_class(config, suffix: str) -> type:
    """The class of the family's modeling module whose name ends with ``suffix`` (e.g.
    ``RMSNorm`` → ``Qwen3RMSNorm``, ``RotaryEmbedding`` → ``LlamaRotaryEmbedding``)."""
    module = modeling_module(config)
    found = [obj for name, obj in vars(module).items()
             if isinstance(obj, type) and name.endswith(suffix) and obj.__module__ == module.__name__]
    if len(found) != 1:
        raise LookupError(f"{module.__name__} defines {len(found)} classes named *{suffix}; the adapter must name one")
    return found[0]


class Rotary:
    """The family's rotary embedding module and apply function, for positions 0..n−1.

    ``layer_type`` is passed to rotary modules that take one (Gemma-3: local and global layers
    rotate with different bases)."""

    def __init__(self, module: torch.nn.Module, apply: Any, layer_type: str | None = None) -> None:
        self.module = module.eval()
        self.apply_fn = apply
        self.layer_type = layer_type if "layer_type" in inspect.signature(module.forward).parameters else None
        self._cache: dict = {}

    @classmethod
    def for_config(cls, config, layer_type: str | None = None, *, cache: dict | None = None,
                   n_heads: int | None = None) -> "Rotary":
        """The rotary module built from ``config`` (no weights: its buffers are functions of the
        config), shared by all layers of one adapter through ``cache``."""
        cache = {} if cache is None else cache
        if "module" not in cache:
            rot_cls = family_class(config, "RotaryEmbedding")
            cache["module"] = rot_cls(config=config)
            cache["apply"] = vars(modeling_module(config))["apply_rotary_pos_emb"]
        return cls(cache["module"], cache["apply"], layer_type)

    def to(self, device=None) -> "Rotary":
        if device is not None:
            self.module.to(device)
        return self

    def cos_sin(self, n: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (n, dtype, str(device))
        if key not in self._cache:
            ids = torch.arange(n, device=device)[None]
            probe = torch.zeros(1, dtype=dtype, device=device)
            kw = {} if self.layer_type is None else {"layer_type": self.layer_type}
            with torch.no_grad():
                self._cache = {key: self.module(probe, ids, **kw)}
        return self._cache[key]

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q (..., H, n, d_h) and k (..., H_kv, n, d_h) by their positions 0..n−1."""
        lead = q.shape[:-3]
        q4 = q.reshape(-1, *q.shape[-3:])
        k4 = k.reshape(-1, *k.shape[-3:])
        cos, sin = self.cos_sin(q.shape[-2], q.dtype, q.device)
        r = cos.shape[-1]
        if r < q.shape[-1]:
            # Partial rotary (GPT-NeoX rotary_pct, Phi partial_rotary_factor): the module's cos/sin
            # cover the first r dimensions of each head; the rest pass unrotated.
            qr, kr = self.apply_fn(q4[..., :r], k4[..., :r], cos, sin)
            qr, kr = torch.cat([qr, q4[..., r:]], -1), torch.cat([kr, k4[..., r:]], -1)
        else:
            qr, kr = self.apply_fn(q4, k4, cos, sin)
        return qr.reshape(*lead, *q.shape[-3:]), kr.reshape(*lead, *k.shape[-3:])

    def to_dict(self) -> dict:
        return {"kind": "rotary", "module": type(self.module).__name__, "layer_type": self.layer_type}


class PerTensorRotary(Rotary):
    """GPT-J's convention: its rotary module returns (sin, cos) for the first ``rotary_dim``
    dimensions, and its ``apply_rotary_pos_emb(tensor, sin, cos)`` rotates interleaved pairs of one
    tensor laid out (batch, n, heads, d_h)."""

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sin, cos = self.cos_sin(q.shape[-2], q.dtype, q.device)
        r = 2 * sin.shape[-1]

        def rot(t: torch.Tensor) -> torch.Tensor:
            t4 = t.reshape(-1, *t.shape[-3:]).transpose(1, 2)  # (B, n, heads, d_h)
            out = torch.cat([self.apply_fn(t4[..., :r], sin, cos), t4[..., r:]], -1)
            return out.transpose(1, 2).reshape(t.shape)

        return rot(q), rot(k)


class Alibi:
    """ALiBi (BLOOM): scores s_ij += m_h·j from the family's own ``build_alibi_tensor`` at
    positions 0..n−1 (equal to m_h (j − i) under the row softmax). Queries and keys are not
    rotated."""

    def __init__(self, build: Any, n_heads: int) -> None:
        self.build = build
        self.n_heads = n_heads

    @classmethod
    def for_config(cls, config, layer_type: str | None = None, *, cache: dict | None = None,
                   n_heads: int | None = None) -> "Alibi":
        return cls(vars(modeling_module(config))["build_alibi_tensor"], int(n_heads))

    def to(self, device=None) -> "Alibi":
        return self

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def score_bias(self, n: int, dtype: torch.dtype, device) -> torch.Tensor:
        """(H, 1, n): added to every query row of head h's scores."""
        ones = torch.ones((1, n), dtype=torch.long, device=device)
        return self.build(ones, self.n_heads, dtype)

    def to_dict(self) -> dict:
        return {"kind": "alibi"}
