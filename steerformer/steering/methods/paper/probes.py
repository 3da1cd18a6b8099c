"""The paper method's own probes (docs/math.md §3, §5): the controlled dynamics of the edited layer,
closed-form in the gain; the FFN pre-compensation of the direction through a differentiable re-run of
the cached blocks (the probe room's ``BlockCache`` with the edited weight replaced); the side of u
that F' = F + γ u w_effᵀ predicts; the fit and held-out split of the states entering the layer.

Controlled dynamics: the layer's attention output is out₀ + γ u (a·z_i), z_i the concatenated head
outputs, so the next state N(x + out₀ + γ c_i u) is closed-form in γ (for a weight-sharing model,
ALBERT, the whole stack is re-run for each γ).

FFN pre-compensation (power-method paper, Section 5). Steering the attention output toward u does
not put the layer's *output* on u: the FFN map and the affine LayerNorms that follow deform it (on
MiniLM the final states saturate near |cos| ≈ 0.78 whatever the gain). Pre-compensation solves
numerically for the direction u to steer the attention toward so that the real final states, FFN
and norms included, align with the wanted u*:

    max_u  mean_i |cos(h_i(u), u*)|,   h(u) = final states with W_O + γ u a,  ‖u‖ = 1

by Adam on u (re-normalized each step), starting at u = u*, at a fixed gain γ.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from ....adapters.base import split_output_heads
from ....loading import ModelSource
from ....matrices import read_attention_weights
from ...measure import ModelProbe, mean_abs_cos


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
        from ....dynamics import normalize

        return normalize(self.y0 + self.z @ delta.to(self.z.device).T)

    def alignment(self, delta: torch.Tensor, u: torch.Tensor) -> float:
        return float(mean_abs_cos(self.states(delta), u))


def dynamics_probe(source: ModelSource, layer: int, *, n_prompts: int = 30, n_tokens: int = 10, seed: int = 0) -> DynamicsProbe:
    """Run the §3 dynamics up to ``layer`` once and keep what one more step needs."""
    # the paper's method only: the dynamics' modules (attention, discrete, tokens) stay unimported
    # when a causal LM is steered by addition
    from ....attention import attention_probs
    from ....dynamics import random_tokens, run_dynamics

    adapter = source.adapter
    seq = adapter.layer_sequence()
    x0 = random_tokens(n_prompts, n_tokens, adapter.d_model, seed=seed)
    # The controlled dynamics run on the CPU (float64 copies of the weights), whatever the model's device.
    weights = read_attention_weights(source, sorted(set(range(layer + 1))), device="cpu")
    if seq[layer] in seq[:layer]:
        # The edited weights also run before ``layer`` (ALBERT): rerun the whole stack each time.
        def rerun(delta: torch.Tensor) -> torch.Tensor:
            W = {k: dataclasses.replace(w, W_O=split_output_heads(w.output_matrix() + delta, w.n_heads))
                 if seq[k] == seq[layer] else w for k, w in weights.items()}
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


def compensate(probe: ModelProbe, target: torch.Tensor, stored_for: Callable[[torch.Tensor], dict[str, torch.Tensor]],
               *, steps: int = 60, lr: float = 0.05,
               on_step: Callable[[float], None] | None = None) -> tuple[torch.Tensor, list[float]]:
    """Direction u (unit, float64) whose edit best aligns the final states with ``target``.

    ``stored_for(u)`` gives the replaced parameters (differentiable in u) for the fixed gain.
    Returns u and the alignment history (one value per step, the first at u = target)."""
    u = target.detach().clone().to(torch.float64).requires_grad_(True)
    opt = torch.optim.Adam([u], lr=lr)
    history: list[float] = []
    best = (-1.0, target.detach().clone())
    for _ in range(steps):
        unit = u / u.norm()
        score = mean_abs_cos(probe.final_states(stored_for(unit)), target, probe.mask)
        val = float(score.detach())
        history.append(val)
        if on_step is not None:
            on_step(val)
        if val > best[0]:
            best = (val, unit.detach().clone())
        opt.zero_grad()
        (-score).backward()
        opt.step()
    return best[1], history


def predicted_u_shift(probe: ModelProbe, w_eff: torch.Tensor, gain: float) -> float:
    """γ · mean w_effᵀx over the held-out tokens entering the edited layer: the coefficient of u
    that F' = F + γ u w_effᵀ (the stacked-value picture) predicts the edit adds — its sign is the
    side of u the final states should move to."""
    X = probe.attn_inputs[probe.mask.to(probe.attn_inputs.device)]
    return float(gain) * float((X @ w_eff.to(device=X.device, dtype=torch.float64)).mean())


def split_inputs(probe: ModelProbe, fraction: float = 2 / 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention-input states of the probe's real tokens, (fit, held-out) split by prompt."""
    P = probe.mask.shape[0]
    k = min(max(1, int(round(P * fraction))), P - 1) if P > 1 else 1
    X, m = probe.attn_inputs, probe.mask.cpu()
    held = X[k:][m[k:]] if P > 1 else X[m][1::2]
    fit = X[:k][m[:k]] if P > 1 else X[m][0::2]
    return fit, held


__all__ = ["DynamicsProbe", "compensate", "dynamics_probe", "predicted_u_shift", "split_inputs"]
