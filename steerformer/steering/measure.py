"""Where steering is measured: the paper's controlled dynamics and the real model's final states.

Both reuse the states entering the edited layer and recompute only what the edit changes:

* controlled dynamics (MATH.md §3): the layer's attention output is out₀ + γ u (a·z_i), z_i the
  concatenated head outputs, so the next state N(x + out₀ + γ c_i u) is closed-form in γ;
* real model: every block from the edited one on is re-run on the inputs it received in one
  cached forward pass (same masks and positional arguments), then the final norm. Only the edited
  layer's output weight differs between runs; for a weight-sharing model (ALBERT) the chain starts
  at the first layer that runs the shared weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from ..adapters.base import Adapter, AttentionWeights
from ..attention import attention_probs
from ..dynamics import normalize, random_tokens, run_dynamics
from ..loading import ModelSource
from .prompts import PromptBatch


def mean_abs_cos(x: torch.Tensor, u: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """mean over tokens of ρ(x, u) = |⟨x, u⟩| / (‖x‖‖u‖) (MATH.md §4); ``mask`` selects tokens."""
    x = x.to(torch.float64)
    u = u.to(device=x.device, dtype=torch.float64)
    rho = (x @ u).abs() / (torch.linalg.vector_norm(x, dim=-1) * torch.linalg.vector_norm(u)).clamp_min(1e-300)
    if mask is None:
        return rho.mean()
    m = mask.to(device=rho.device, dtype=torch.bool)
    return rho[m].mean()


# ---- controlled dynamics -----------------------------------------------------------------------
@dataclasses.dataclass
class DynamicsProbe:
    """Alignment ρ(x(L+1), u) of the controlled dynamics as a function of the gain γ."""

    y0: torch.Tensor  # (P, n, d) x + out₀ before normalization
    z: torch.Tensor  # (P, n, d) concatenated head outputs entering W_O
    rerun: Callable[[torch.Tensor], torch.Tensor] | None = None  # shared weights: full rerun given ΔW_O

    def states(self, delta: torch.Tensor) -> torch.Tensor:
        """Output states of the edited layer for the output-weight change ``delta`` (d, d)."""
        if self.rerun is not None:
            return self.rerun(delta)
        return normalize(self.y0 + self.z @ delta.to(self.z.device).T)

    def alignment(self, delta: torch.Tensor, u: torch.Tensor) -> float:
        return float(mean_abs_cos(self.states(delta), u))


def dynamics_probe(source: ModelSource, layer: int, *, n_prompts: int = 30, n_tokens: int = 10, seed: int = 0) -> DynamicsProbe:
    """Run the §3 dynamics up to ``layer`` once and keep what one more step needs."""
    adapter = source.adapter
    d = adapter.d_model
    seq = adapter.layer_sequence()
    x0 = random_tokens(n_prompts, n_tokens, d, seed=seed)
    from ..matrices import read_attention_weights

    # The controlled dynamics run on the CPU (float64 copies of the weights), whatever the model's device.
    weights = read_attention_weights(source, sorted(set(range(layer + 1))), device="cpu")
    if seq[layer] in seq[:layer]:
        # The edited weights also run before ``layer`` (ALBERT): rerun the whole stack each time.
        def rerun(delta: torch.Tensor) -> torch.Tensor:
            W = {k: _with_delta(w, delta) if seq[k] == seq[layer] else w for k, w in weights.items()}
            return run_dynamics(source, x0, layers=list(range(layer + 1)), weights=W).states[-1]

        return DynamicsProbe(y0=x0, z=x0, rerun=rerun)
    x = run_dynamics(source, x0, layers=list(range(layer)), weights=weights).states[-1] if layer > 0 else x0
    w = weights[layer]
    with torch.no_grad():
        A = attention_probs(x, w)  # (P, H, n, n)
        v = torch.einsum("pnd,hkd->phnk", x, w.value_heads())
        heads = A @ v  # (P, H, n, d_h)
        z = heads.permute(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)  # head h → column block h of W_O
        out0 = z @ w.output_matrix().T
    return DynamicsProbe(y0=x + out0, z=z)


def _with_delta(w: AttentionWeights, delta: torch.Tensor) -> AttentionWeights:
    from ..adapters.base import split_output_heads

    return dataclasses.replace(w, W_O=split_output_heads(w.output_matrix() + delta, w.n_heads))


# ---- real model --------------------------------------------------------------------------------
@dataclasses.dataclass
class ModelProbe:
    """Cached inputs of the blocks from the edited one on, for one prompt batch."""

    model: Any
    adapter: Adapter
    calls: list[tuple[str, tuple, dict]]  # (block path, args, kwargs) per execution layer, from `start`
    mask: torch.Tensor  # (P, n) real tokens
    attn_inputs: torch.Tensor  # (P, n, d) float64: states entering the edited layer's attention
    final_before: torch.Tensor  # (P, n, d) float64

    def final_states(self, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Final hidden states re-run from the cache; ``params`` optionally replaces parameters of the
        blocks (keys relative to the base model) without touching the model (differentiable)."""
        base = self.model.base_model
        h = None
        for name, args, kwargs in self.calls:
            block = base.get_submodule(name)
            if h is not None:
                args, kwargs = _replace_hidden(args, kwargs, h)
            if params:
                local = {k[len(name) + 1:]: v for k, v in params.items() if k.startswith(name + ".")}
                out = torch.func.functional_call(block, local, args, kwargs)
            else:
                out = block(*args, **kwargs)
            h = out[0] if isinstance(out, (tuple, list)) else out
        norm = self.adapter.final_norm(base)
        if norm is not None:
            h = norm(h)
        return h

    def alignment(self, u: torch.Tensor, params: dict[str, torch.Tensor] | None = None) -> float:
        with torch.no_grad():
            return float(mean_abs_cos(self.final_states(params), u, self.mask))

    def split_inputs(self, fraction: float = 2 / 3) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention-input states of the real tokens, (fit, held-out) split by prompt."""
        P = self.mask.shape[0]
        k = min(max(1, int(round(P * fraction))), P - 1) if P > 1 else 1
        X, m = self.attn_inputs, self.mask.cpu()
        held = X[k:][m[k:]] if P > 1 else X[m][1::2]
        fit = X[:k][m[:k]] if P > 1 else X[m][0::2]
        return fit, held


def _replace_hidden(args: tuple, kwargs: dict, h: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (h, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": h}


def run_hooked(model: Any, batch: Any, handles: list, *, expected_calls: int, calls: list) -> None:
    """One no-grad forward of the base model on ``batch`` (inputs on the model's device, no KV cache),
    then remove the hooks in ``handles``; the hooks must have seen one call per execution layer."""
    base = model.base_model
    try:
        with torch.no_grad():
            kw = {"use_cache": False} if getattr(model.config, "use_cache", None) is not None else {}
            dev = next(base.parameters()).device
            base(**{k: v.to(dev) for k, v in batch.inputs().items()}, **kw)
    finally:
        for h in handles:
            h.remove()
    if len(calls) != expected_calls:
        raise RuntimeError(f"expected {expected_calls} block calls, saw {len(calls)}: adapter.layer_block is wrong "
                           f"for {type(model).__name__}")


def model_probe(model: Any, adapter: Adapter, layer: int, batch: PromptBatch) -> ModelProbe:
    """One forward pass of ``model`` on ``batch`` recording every block's inputs and the edited
    layer's attention input."""
    base = model.base_model
    seq = adapter.layer_sequence()
    slot = seq[layer]
    start = seq.index(slot)  # first layer running the edited weights
    blocks = sorted({adapter.layer_block(s) for s in set(seq)})
    calls: list[tuple[str, tuple, dict]] = []
    attn_calls: list[torch.Tensor] = []
    handles = []
    for name in blocks:
        handles.append(base.get_submodule(name).register_forward_pre_hook(
            lambda m, a, kw, n=name: calls.append((n, a, dict(kw))), with_kwargs=True))
    handles.append(base.get_submodule(adapter.slots()[slot]).register_forward_pre_hook(
        lambda m, a, kw: attn_calls.append((a[0] if a else kw["hidden_states"]).detach()), with_kwargs=True))
    run_hooked(model, batch, handles, expected_calls=len(seq), calls=calls)
    # The attention input of execution layer `layer` is the (layer - start)-th call of that slot.
    X = attn_calls[seq[:layer].count(slot)]
    mask = batch.attention_mask.to(torch.bool)
    probe = ModelProbe(model=model, adapter=adapter, calls=calls[start:], mask=mask,
                       attn_inputs=X.to(torch.float64).cpu(), final_before=torch.empty(0))
    with torch.no_grad():
        probe.final_before = probe.final_states().to(torch.float64)
    return probe
