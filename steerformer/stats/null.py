"""The null model of the power-method verdict (docs/math.md §4b, §4c) and its draws, batched.

Draw s replaces every layer's W_Q, W_K, W_V, W_O by Gaussian matrices with that matrix's own
standard deviation, in the layout the layer has (grouped-query layers stay grouped; shared-weight
layers share their draw), with every bias zero, and keeps the masks, score scales, positions and
(with ``layer_norm``) the model's pre-attention norm. The same initial tokens run through the
controlled dynamics of the random layers; Δρ_k and P_k are measured against each random layer's own
principal eigenvector (largest real part; the 2-D span{Re v1, Im v1} when λ1 is complex, as for the
trained layers; F's zero eigenvalue takes part in the ordering, docs/math.md §1b).

Each (draw, layer) has its own seed, derived from (seed, draw, slot), so a draw is the same whatever
the chunking, the device or the number of draws asked for. The draws of a chunk run as one tensor
program: the weights stacked along a leading draw axis, the dynamics step vmapped over it, the
eigenvectors from one batched solve (:func:`steerformer.eig.rightmost_eig`), the correlations one
batched product. The principal eigenvectors depend on the weights only, so repeated runs on new
tokens (``--seeds``) pass a ``bases`` cache and solve each random layer once.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import torch

from ..adapters.base import AttentionWeights
from ..configs import progress_bar
from ..dynamics import dynamics_step, pre_attention_norms
from ..eig import null_vectors, rightmost_eig
from ..spectra import REAL_TOL
from .testing import adjust, monte_carlo_p

_MATRICES = ("W_Q", "W_K", "W_V", "W_O")
_BIASES = ("b_Q", "b_K", "b_V", "b_O")
#: Memory a chunk of draws may take (weights, tokens and the step's intermediates), bytes.
CHUNK_BYTES = 256 * 2 ** 20


def slots(weights: dict[int, AttentionWeights]) -> dict[int, int]:
    """Layer id → weight slot: layers holding the same W_V tensor (ALBERT) share a slot, hence a draw."""
    seen: dict[int, int] = {}
    return {k: seen.setdefault(id(weights[k].W_V), len(seen)) for k in sorted(weights)}


def _stds(w: AttentionWeights) -> dict[str, float]:
    return {name: float(getattr(w, name).detach().double().std()) for name in _MATRICES}


def _draw(w: AttentionWeights, seed: int, draw: int, slot: int, stds: dict[str, float] | None = None
          ) -> dict[str, torch.Tensor]:
    """One (draw, slot)'s Gaussian matrices: an independent stream per (seed, draw, slot) (NumPy's
    SeedSequence; its ziggurat sampler is twice as fast as torch's here)."""
    rng = np.random.default_rng([int(seed), int(draw), int(slot)])
    stds = stds or _stds(w)
    tensors = {name: getattr(w, name) for name in _MATRICES}
    return {name: (torch.from_numpy(rng.standard_normal(tuple(t.shape))) * stds[name]).to(t)
            for name, t in tensors.items()}


def null_weights(weights: dict[int, AttentionWeights], draw: int, *, seed: int = 0) -> dict[int, AttentionWeights]:
    """Draw ``draw`` of the null model for every layer of ``weights`` (module docstring)."""
    slot = slots(weights)
    drawn: dict[int, dict[str, torch.Tensor]] = {}
    out = {}
    for k in sorted(weights):
        if slot[k] not in drawn:
            drawn[slot[k]] = _draw(weights[k], seed, draw, slot[k])
        out[k] = dataclasses.replace(weights[k], **drawn[slot[k]], **dict.fromkeys(_BIASES))
    return out


def principal_bases(template: AttentionWeights, W_V: torch.Tensor, W_O: torch.Tensor) -> torch.Tensor:
    """(K, d, 2) orthonormal bases of v1 of each F_s = W_O(s)·V(s) (values and outputs stacked
    along a leading draw axis, laid out as ``template``'s): [v1, 0] when λ1 is real, span{Re v1,
    Im v1} when complex. F is never formed when its rank r < d: v1 = A w from BA w = λ1 w, or a
    null vector of F when no nonzero eigenvalue has a positive real part."""
    A, B = zip(*(dataclasses.replace(template, W_V=v, W_O=o).layer_factors() for v, o in zip(W_V, W_O)))
    A, B = torch.stack(A).to(torch.float64), torch.stack(B).to(torch.float64)
    d, r = A.shape[-2], A.shape[-1]
    if r < d:
        lam, w, rad = rightmost_eig(B @ A)
        vec = torch.complex(A @ w.real[..., None], A @ w.imag[..., None])[..., 0]
        vec = vec / torch.linalg.vector_norm(vec, dim=-1, keepdim=True)
        for s in torch.nonzero(lam.real < 0).flatten().tolist():  # the zero eigenvalue is rightmost
            lam[s] = 0
            vec[s] = null_vectors(B[s], 1)[:, 0].to(vec.dtype)
    else:
        lam, vec, rad = rightmost_eig(A @ B)
    pivot = vec.gather(-1, vec.abs().argmax(-1, keepdim=True))
    vec = vec * (pivot.conj() / pivot.abs())  # a real eigenvector becomes real
    a, b = vec.real, vec.imag
    q1 = a / torch.linalg.vector_norm(a, dim=-1, keepdim=True)
    res = b
    for _ in range(2):  # Gram–Schmidt twice, as eigenbasis.orthonormal_pair
        res = res - (q1 * res).sum(-1, keepdim=True) * q1
    nr = torch.linalg.vector_norm(res, dim=-1, keepdim=True)
    pair = (lam.imag.abs() > REAL_TOL * rad)[:, None] & (nr > 1e-14 * torch.linalg.vector_norm(b, dim=-1, keepdim=True))
    q2 = torch.where(pair, res / nr.clamp_min(1e-300), torch.zeros_like(res))
    return torch.stack([q1, q2], dim=-1)


def _rho(x: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """ρ of every token of every draw: x (K, ..., d), basis (K, d, 2) → (K, N)."""
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    return torch.linalg.vector_norm(x @ basis.to(x.dtype), dim=-1) / torch.linalg.vector_norm(x, dim=-1)


def _stepper(template: AttentionWeights, *, tau: float, bias: bool, norm: torch.nn.Module | None):
    """The dynamics step of ``template``'s layer vmapped over a leading draw axis of tokens and
    Q/K/V/O weights (biases zero)."""
    def one(x, W_Q, W_K, W_V, W_O):
        w = dataclasses.replace(template, W_Q=W_Q, W_K=W_K, W_V=W_V, W_O=W_O, **dict.fromkeys(_BIASES))
        return dynamics_step(x, w, tau=tau, bias=bias, norm=norm)

    return torch.func.vmap(one)


def chunk_size(weights: dict[int, AttentionWeights], tokens: torch.Tensor, draws: int) -> int:
    """Draws per chunk so that one chunk stays near :data:`CHUNK_BYTES`."""
    per_weights = max(sum(getattr(w, n).numel() for n in _MATRICES) for w in weights.values())
    per_draw = 8 * (per_weights + 8 * tokens.numel())  # weights, tokens and the step's intermediates
    return int(max(1, min(draws, CHUNK_BYTES // per_draw)))


def null_statistics(source: Any, weights: dict[int, AttentionWeights], tokens: torch.Tensor, layers: Sequence[int],
                    draws: int, *, seed: int = 0, tau: float = 1.0, bias: bool = False, layer_norm: bool = False,
                    dtype: torch.dtype = torch.float64, device: str | torch.device | None = None,
                    bases: dict | None = None, chunk: int | None = None,
                    progress: bool | str = False) -> dict[str, np.ndarray]:
    """Δρ_k and P_k of ``draws`` null draws on the initial ``tokens`` (prompts, n, d), as the trained
    run ran them (already normalized or raw): arrays ``delta`` and ``P`` of shape (draws, steps).

    ``tau``, ``bias``, ``layer_norm``, ``dtype``, ``device``: as the trained run's
    :func:`~steerformer.dynamics.run_dynamics`. ``seed``: of the draws (module docstring).
    ``bases``: a dict filled with (and read for) each (draw, slot)'s principal basis, to share
    the eigenproblems between runs on other tokens. ``chunk``: draws run together (default:
    :func:`chunk_size`). ``progress``: a bar over the draws (:func:`~steerformer.configs.progress_bar`)."""
    ids = [int(k) for k in layers]
    slot = slots({k: weights[k] for k in ids})
    norms = pre_attention_norms(source, ids, dtype, device) if layer_norm else {}
    x0 = torch.as_tensor(tokens).to(device=device, dtype=dtype)
    cache = {} if bases is None else bases
    chunk = chunk or chunk_size({k: weights[k] for k in ids}, x0, draws)
    delta = np.zeros((draws, len(ids)))
    P = np.zeros((draws, len(ids)))
    stds = {k: _stds(weights[k]) for k in ids}
    steppers = {k: _stepper(weights[k], tau=tau, bias=bias, norm=norms.get(k)) for k in ids}
    bar = progress_bar(progress, "null draws", total=draws, unit="draw")
    with torch.no_grad(), bar:
        for start in range(0, draws, chunk):
            batch = range(start, min(draws, start + chunk))
            bar.update(len(batch))
            x = x0.expand(len(batch), *x0.shape)
            for step, k in enumerate(ids):
                drawn = [_draw(weights[k], seed, s, slot[k], stds[k]) for s in batch]
                W = {n: torch.stack([dr[n] for dr in drawn]).to(device=device, dtype=dtype) for n in _MATRICES}
                missing = [i for i, s in enumerate(batch) if (s, slot[k]) not in cache]
                if missing:
                    got = principal_bases(weights[k], W["W_V"][missing], W["W_O"][missing])
                    cache.update({(batch[i], slot[k]): b for i, b in zip(missing, got)})
                basis = torch.stack([cache[(s, slot[k])] for s in batch]).to(x.device)
                nxt = steppers[k](x, W["W_Q"], W["W_K"], W["W_V"], W["W_O"])
                diff = _rho(nxt, basis) - _rho(x, basis)
                delta[batch.start:batch.stop, step] = diff.mean(-1).cpu().numpy()
                P[batch.start:batch.stop, step] = (diff > 0).double().mean(-1).cpu().numpy()
                x = nxt
    return {"delta": delta, "P": P}


def annotate(records: list[dict], null: dict[str, np.ndarray], *, alpha: float = 0.05, correction: str = "bh",
             level: float = 0.95) -> None:
    """Add the null columns, the p-values and the beyond-chance verdict to each step's record (in
    place; docs/math.md §4c, :mod:`.testing`): the null's mean, std (K − 1 in the denominator; 0 for
    K = 1) and central ``level`` interval of Δρ and P, the one-sided p-values of the observed Δρ
    and P among the draws, the same adjusted across the steps by ``correction``, and
    ``beyond_chance`` = a power-method step whose two adjusted p-values are both < ``alpha``."""
    K = null["delta"].shape[0]
    ddof = 1 if K > 1 else 0
    q = ((1 - level) / 2, (1 + level) / 2)
    for key, col, tag in (("delta", "delta_rho_mean", "delta"), ("P", "P", "P")):
        obs = np.array([r[col] for r in records], dtype=float)
        p = monte_carlo_p(obs, null[key])
        padj = adjust(p, correction)
        lo, hi = np.quantile(null[key], q, axis=0)
        for i, r in enumerate(records):
            r.update({f"null_{tag}_mean": float(null[key][:, i].mean()), f"null_{tag}_std": float(null[key][:, i].std(ddof=ddof)),
                      f"null_{tag}_lo": float(lo[i]), f"null_{tag}_hi": float(hi[i]),
                      f"p_{tag}": float(p[i]), f"p_{tag}_adjusted": float(padj[i])})
    for r in records:
        r["beyond_chance"] = bool(r["power_method_step"] and r["p_delta_adjusted"] < alpha and r["p_P_adjusted"] < alpha)
