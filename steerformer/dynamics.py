"""The controlled layer dynamics of the power-method paper (docs/math.md §3, eq. (1)/(3)):

    x_i(k+1) = N( x_i(k) + τ Σ_h W_h V_h Σ_j A^h_ij(x(k)) x_j(k) )

each layer's own attention (query/key weights and biases, score scale, mask), skip connection,
L2 normalization N in place of LayerNorm, FFN dropped. Built from the adapters' weights and
batched over prompts; no model module is patched or run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import torch

from .adapters.base import AttentionWeights
from .attention import attention_output, attention_probs
from .discrete import residual_map, w_norm
from .errors import bad_argument
from .loading import ModelSource, as_source
from .matrices import read_attention_weights, select_layers
from .tokens import check_tokens, random_tokens  # noqa: F401  (re-exported: one draw, one check)


@dataclasses.dataclass
class Trajectory:
    """Token states through the controlled dynamics.

    ``states[0]`` are the initial tokens, ``states[k+1]`` the output of step k, which ran
    execution layer ``layer_ids[k]`` (for prolonged shared-weight runs the ids repeat).
    """

    states: torch.Tensor  # (steps + 1, prompts, tokens, d)
    layer_ids: list[int]
    options: dict

    @property
    def n_steps(self) -> int:
        return len(self.layer_ids)


def normalize(x: torch.Tensor) -> torch.Tensor:
    """N(y) = y / ‖y‖₂ along the last axis."""
    return x / w_norm(x)


def dynamics_step(x: torch.Tensor, w: AttentionWeights, *, tau: float = 1.0, bias: bool = False,
                  norm: torch.nn.Module | None = None, probs: torch.Tensor | None = None) -> torch.Tensor:
    """One step of eq. (1) on tokens ``x`` (..., n, d). ``norm``: the model's pre-attention norm
    applied to the attention input (option of docs/math.md §3); the skip uses raw ``x``."""
    xin = x if norm is None else norm(x)
    A = attention_probs(xin, w) if probs is None else probs
    return residual_map(x, attention_output(xin, w, A, bias=bias), tau=tau)


def pre_attention_norms(source: ModelSource, ids: Sequence[int], dtype, device) -> dict[int, torch.nn.Module]:
    """The model's own pre-attention norms of pre-LN models (LayerNorm or RMSNorm with the model's
    ε, the family's own module class), loaded from the stored weights."""
    out: dict[int, torch.nn.Module] = {}
    with source.tensors() as get:
        for k in ids:
            norm = source.adapter.pre_attention_norm_module(k, get)
            if norm is not None:
                out[k] = norm.to(dtype=dtype, device=device)
    return out


def run_dynamics(model: Any, tokens: Any = None, *, n_prompts: int = 100, n_tokens: int = 10, seed: int = 0,
                 tau: float = 1.0, layers: Sequence[int] | None = None, repeat: int = 1, layer_norm: bool = False,
                 bias: bool = False, weights: dict[int, AttentionWeights] | None = None,
                 dtype: torch.dtype = torch.float64, device: str | torch.device | None = None,
                 revision: str | None = None, normalize_initial: bool = True) -> Trajectory:
    """Run tokens through the controlled dynamics of every selected layer, ``repeat`` times over
    (``repeat = K`` gives ALBERT's prolonged K·L-layer run of Fig. 6(c)).

    ``tokens``: initial tokens (prompts, tokens, d); default ``n_prompts × n_tokens`` random unit
    tokens drawn with ``seed``. ``weights`` lets a caller reuse already-read layer weights.
    ``normalize_initial``: put the initial tokens (random or user-given) on the unit sphere first
    (default, docs/math.md §3); False runs them as drawn / given — Appendix B of the paper says only
    "drawn from a normal distribution". The first step's output is normalized either way.
    """
    if not (isinstance(repeat, (int, np.integer)) and repeat >= 1):
        raise bad_argument("repeat", repeat, "an integer K >= 1 (how many times the layer stack is applied)")
    if not np.isfinite(tau):
        raise bad_argument("tau", tau, "a finite step size")
    source = as_source(model, revision=revision)
    ids = select_layers(layers, source.adapter.n_layers)
    d = source.adapter.d_model
    if tokens is None:
        for name, v in (("n_prompts", n_prompts), ("n_tokens", n_tokens)):
            if not (isinstance(v, (int, np.integer)) and v >= 1):
                raise bad_argument(name, v, "a positive integer")
        x = random_tokens(n_prompts, n_tokens, d, seed=seed, normalize=normalize_initial, dtype=dtype)
    else:
        x = check_tokens(tokens, d, normalize="project" if normalize_initial else "keep", batched=True).to(dtype)
    x = x.to(device)
    if weights is None:
        weights = read_attention_weights(source, ids, dtype=dtype, device=device)
    norms = pre_attention_norms(source, ids, dtype, device) if layer_norm else {}
    seq = list(ids) * int(repeat)
    states = torch.empty((len(seq) + 1, *x.shape), dtype=dtype, device=device)
    states[0] = x
    with torch.no_grad():
        for step, k in enumerate(seq):
            states[step + 1] = dynamics_step(states[step], weights[k], tau=tau, bias=bias, norm=norms.get(k))
    return Trajectory(states=states, layer_ids=seq, options={
        "tau": tau, "repeat": int(repeat), "layer_norm": layer_norm, "bias": bias, "seed": seed,
        "prompts": int(x.shape[0]), "tokens": int(x.shape[1]), "user_tokens": tokens is not None,
        "normalize_initial": bool(normalize_initial),
    })
