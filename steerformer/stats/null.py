"""A null model for the power-method verdict (MATH.md §4b).

Draw s (seed s, s = 0..K−1) replaces every layer's W_Q, W_K, W_V, W_O by Gaussian matrices with
that matrix's own standard deviation, in the layout the layer has (grouped-query layers stay
grouped; shared-weight layers share their draw), with every bias zero, and keeps the masks, score
scales, positions and (with ``layer_norm``) the model's pre-attention norm. The same initial tokens
run through the controlled dynamics of the random layers; Δρ_k and P_k are measured against each
random layer's own principal eigenvector. A layer is a power-method step **beyond chance** when it
is one (§4) and Δρ_k > mean + 2·std and P_k > mean + 2·std of its K null values (std with K − 1 in
the denominator; 0 when K = 1).

Only v1 of each random F is needed (not the baselines), so a draw costs the dynamics plus one
partial eigenproblem per layer (ARPACK, largest real part), not a second full spectrum.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

import numpy as np
import torch

from ..adapters.base import AttentionWeights
from .directions import orthonormal_pair

log = logging.getLogger(__name__)

_MATRICES = ("W_Q", "W_K", "W_V", "W_O")
_BIASES = ("b_Q", "b_K", "b_V", "b_O")


def null_weights(weights: dict[int, AttentionWeights], seed: int) -> dict[int, AttentionWeights]:
    """One draw of the null model for every layer of ``weights`` (see the module docstring).
    Layers that share their weights (the same W_V tensor) share the draw."""
    g = torch.Generator().manual_seed(int(seed))
    drawn: dict[int, dict[str, torch.Tensor]] = {}
    out: dict[int, AttentionWeights] = {}
    for k in sorted(weights):
        w = weights[k]
        key = id(w.W_V)
        if key not in drawn:
            new = {}
            for name in _MATRICES:
                t = getattr(w, name)
                std = float(t.double().std())
                new[name] = (torch.randn(tuple(t.shape), generator=g, dtype=torch.float64) * std).to(t)
            drawn[key] = new
        out[k] = dataclasses.replace(w, **drawn[key], **dict.fromkeys(_BIASES))
    return out


def principal_basis(F: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis (d, 1) of v1 (the eigenvalue of largest real part, MATH.md §2) of a real
    square matrix, or (d, 2) of span{Re v1, Im v1} when λ1 is complex."""
    M = F.detach().cpu().double().numpy()
    d = M.shape[0]
    vals = vecs = None
    if d >= 64:
        from scipy.sparse.linalg import ArpackNoConvergence, eigs

        try:
            vals, vecs = eigs(M, k=min(6, d - 2), ncv=min(64, d - 1), which="LR", tol=1e-10, maxiter=20 * d)
        except ArpackNoConvergence:
            vals = None
    if vals is None:
        vals, vecs = np.linalg.eig(M)
    j = int(np.argmax(vals.real))
    lam, v = vals[j], torch.from_numpy(np.ascontiguousarray(vecs[:, j]))
    if abs(lam.imag) > 1e-10 * max(float(np.abs(vals).max()), 1e-300):
        return orthonormal_pair(v.real.double(), v.imag.double())
    u = v.real.double()
    return (u / torch.linalg.vector_norm(u))[:, None]


def _rho(x: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    x = x.reshape(-1, x.shape[-1]).double()
    return torch.linalg.vector_norm(x @ B.to(x.device), dim=-1) / torch.linalg.vector_norm(x, dim=-1)


def null_statistics(source: Any, weights: dict[int, AttentionWeights], tokens: torch.Tensor, layers: Sequence[int],
                    draws: int, **dynamics: Any) -> dict[str, np.ndarray]:
    """Δρ_k and P_k of ``draws`` null draws: arrays ``delta`` and ``P`` of shape (draws, steps).

    ``tokens``: the initial tokens the trained model ran (already normalized or raw, as it ran
    them); ``dynamics``: the options of :func:`~steerformer.dynamics.run_dynamics` (tau, bias,
    layer_norm, dtype, device) the trained run used."""
    from ..dynamics import run_dynamics

    delta = np.zeros((draws, len(layers)))
    P = np.zeros((draws, len(layers)))
    for s in range(draws):
        w = null_weights(weights, s)
        traj = run_dynamics(source, tokens, layers=layers, weights=w, normalize_initial=False, **dynamics)
        bases: dict[int, torch.Tensor] = {}
        for step, k in enumerate(traj.layer_ids):
            key = id(w[k].W_V)
            if key not in bases:
                bases[key] = principal_basis(w[k].layer_matrix())
            d = _rho(traj.states[step + 1], bases[key]) - _rho(traj.states[step], bases[key])
            delta[s, step], P[s, step] = float(d.mean()), float((d > 0).double().mean())
    return {"delta": delta, "P": P}


def annotate(records: list[dict], null: dict[str, np.ndarray]) -> None:
    """Add the null columns and the beyond-chance verdict to each step's record (in place)."""
    K = null["delta"].shape[0]
    ddof = 1 if K > 1 else 0
    for i, r in enumerate(records):
        dm, ds = float(null["delta"][:, i].mean()), float(null["delta"][:, i].std(ddof=ddof))
        pm, ps = float(null["P"][:, i].mean()), float(null["P"][:, i].std(ddof=ddof))
        r.update(null_delta_mean=dm, null_delta_std=ds, null_P_mean=pm, null_P_std=ps)
        r["beyond_chance"] = bool(r["power_method_step"] and r["delta_rho_mean"] > dm + 2 * ds
                                  and r["P"] > pm + 2 * ps)
