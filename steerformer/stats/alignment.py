"""Per-layer power-method statistics of docs/math.md §4 (pure functions on tensors).

For step k (one application of layer ℓ = step_layers[k]) with inputs x_i(k) and outputs x_i(k+1):
ρ_k, Δρ_k (eq. 4), P_k (eq. 5), their baselines over all eigen-directions of F_ℓ (mixed: conjugate
pairs once through their 2-D subspace; 1-D: real eigenvectors only), ρ(x, Re v1), the subspace
correlation ρ_S, the cumulative-product correlation and the intertoken distance.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..configs import progress_bar
from ..errors import bad_argument
from ..spectra import Spectra, lambda_is_complex
from .cumulative import cumulative_principal
from .eigenbasis import Directions, chance_rho_S, eigen_directions, principal_subspace
from .result import CI_COLUMNS, AlignmentStats, histogram
from .uncertainty import bootstrap_intervals, prompt_sums

#: Statistics whose per-token values (steps, N) are kept for plots and the NPZ.
PER_TOKEN = ("rho_before", "rho", "rho_re_v1", "rho_S", "rho_cumulative")


def _mean_std(t: torch.Tensor) -> tuple[float, float]:
    if t.numel() == 0:
        return float("nan"), float("nan")
    return float(t.mean()), float(t.std(unbiased=False))


def intertoken_distance(x: torch.Tensor, lengths: Sequence[int]) -> tuple[float, float]:
    """(mean over prompts of the mean pairwise ‖x_i − x_j‖ within the prompt, max over all pairs)
    of unit-normalized tokens ``x`` (N, d), prompts given by consecutive ``lengths``."""
    x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    if len(set(lengths)) == 1:
        n = lengths[0]
        if n < 2:
            return 0.0, 0.0
        D = torch.cdist(x.reshape(len(lengths), n, -1), x.reshape(len(lengths), n, -1))
        per = D.sum((-1, -2)) / (n * (n - 1))
        return float(per.mean()), float(D.max())
    means, mx, start = [], 0.0, 0
    for n in lengths:
        xs = x[start:start + n]
        start += n
        if n < 2:
            continue
        D = torch.cdist(xs, xs)
        means.append(float(D.sum()) / (n * (n - 1)))
        mx = max(mx, float(D.max()))
    return (float(np.mean(means)) if means else 0.0), mx


def layer_statistics(before: torch.Tensor, after: torch.Tensor, dirs: Directions, S: torch.Tensor,
                     extra: torch.Tensor | None = None) -> tuple[dict, dict, dict]:
    """Statistics of one step from tokens ``before``/``after`` (N, d).

    One GEMM projects all 2N tokens on every eigen-direction plus the subspace S (and the
    cumulative direction(s) ``extra``). Returns (JSON-ready record, per-token arrays of
    :data:`PER_TOKEN`, and for every column of :data:`CI_COLUMNS` the per-token values whose mean
    it is — what the bootstrap over prompts resamples).
    """
    N = before.shape[0]
    X = torch.cat([before, after]).to(torch.float64)
    # The bases come from the spectra (on the CPU); the GEMM runs where the tokens are.
    B = torch.cat([dirs.basis, S], dim=1).to(X.device)
    C = X @ B if extra is None else torch.cat([X @ B, X @ extra.to(X.device)], dim=1)
    norms = torch.linalg.vector_norm(X, dim=-1)
    m, s = dirs.basis.shape[1], S.shape[1]
    R = dirs.group_correlations(C[:, :m], norms)  # (2N, G)
    Rb, Ra = R[:N], R[N:]
    dR = Ra - Rb
    rho, rho_before = Ra[:, 0], Rb[:, 0]
    rho_S = torch.sqrt((C[N:, m:m + s] ** 2).sum(-1)) / norms[N:]
    # Re v1 is the first basis column of group 0 (for a pair, the QR keeps Re v1 / ‖Re v1‖ first).
    rho_re = C[N:, int(dirs.first[0])].abs() / norms[N:]
    rec = {}
    rec["rho_mean"], rec["rho_std"] = _mean_std(rho)
    rec["rho_before_mean"], rec["rho_before_std"] = _mean_std(rho_before)
    rec["delta_rho_mean"], rec["delta_rho_std"] = _mean_std(dR[:, 0])
    rec["P"] = float((dR[:, 0] > 0).double().mean())
    rec["rho_re_v1_mean"], rec["rho_re_v1_std"] = _mean_std(rho_re)
    rec["rho_S_mean"], rec["rho_S_std"] = _mean_std(rho_S)
    rec["subspace_dim"] = int(s)
    rec["rho_S_chance"] = chance_rho_S(int(s), int(before.shape[1]))
    # Baselines: mean over directions and tokens; std over all (token, direction) values; only the
    # directions of eigenvalues above the numerical rank's cut (docs/math.md §1b).
    in_rank = dirs.in_rank if dirs.in_rank is not None else torch.ones_like(dirs.is_pair)
    one_d = ~dirs.is_pair & in_rank
    means = {"rho_mean": rho, "rho_before_mean": rho_before, "delta_rho_mean": dR[:, 0],
             "P": (dR[:, 0] > 0).double(), "rho_re_v1_mean": rho_re, "rho_S_mean": rho_S}
    for tag, sel in (("baseline", in_rank), ("baseline1d", one_d)):
        ra, dr = Ra[:, sel], dR[:, sel]
        rec[f"{tag}_rho_mean"], rec[f"{tag}_rho_std"] = _mean_std(ra)
        rec[f"{tag}_delta_mean"], rec[f"{tag}_delta_std"] = _mean_std(dr)
        rec[f"{tag}_P"] = float((dr > 0).double().mean()) if dr.numel() else float("nan")
        if dr.numel():  # a token's mean over the directions: the baseline is their mean over tokens
            means[f"{tag}_rho_mean"], means[f"{tag}_delta_mean"] = ra.mean(1), dr.mean(1)
            means[f"{tag}_P"] = (dr > 0).double().mean(1)
    rec["n_real_directions"] = int(one_d.sum())
    rec["n_pair_directions"] = int((dirs.is_pair & in_rank).sum())
    rec["numerical_rank"] = int(dirs.numerical_rank if dirs.numerical_rank is not None else 2 * int(
        dirs.is_pair.sum()) + int((~dirs.is_pair).sum()))
    tokens = {"rho_before": rho_before, "rho": rho, "rho_re_v1": rho_re, "rho_S": rho_S}
    if extra is not None:
        rho_c = torch.sqrt((C[N:, m + s:] ** 2).sum(-1)) / norms[N:]
        rec["cumulative_rho_mean"], rec["cumulative_rho_std"] = _mean_std(rho_c)
        tokens["rho_cumulative"] = rho_c
        means["cumulative_rho_mean"] = rho_c
    rec["power_method_step"] = bool(rec["delta_rho_mean"] > 0 and rec["delta_rho_mean"] > rec["baseline_delta_mean"]
                                    and rec["P"] > rec["baseline_P"])
    return rec, tokens, means


def _add_intervals(records: list[dict], sums: list[tuple[list[str], torch.Tensor]], lengths: Sequence[int], *,
                   level: float, resamples: int, seed: int) -> None:
    """``<column>_lo`` / ``<column>_hi`` in every step's record (in place), all steps and columns
    from the same resamples of the prompts."""
    lo, hi = bootstrap_intervals(torch.cat([t for _, t in sums]), lengths, level=level, resamples=resamples,
                                 seed=seed)
    i = 0
    for rec, (names, _) in zip(records, sums):
        for name in names:
            rec[f"{name}_lo"], rec[f"{name}_hi"] = float(lo[i]), float(hi[i])
            i += 1


def _flatten(states, lengths, step_layers, options):
    """Accept a Trajectory, HiddenStates, or a tensor (steps+1, P, n, d) / (steps+1, N, d)."""
    if hasattr(states, "states") and hasattr(states, "layer_ids"):
        opts = {**getattr(states, "options", {}), **(options or {})}
        lengths = lengths if lengths is not None else getattr(states, "lengths", None)
        step_layers = step_layers if step_layers is not None else states.layer_ids
        states, options = states.states, opts
    X = torch.as_tensor(states)
    if X.ndim == 4:
        S1, P, n, d = X.shape
        lengths = [n] * P if lengths is None else list(lengths)
        X = X.reshape(S1, P * n, d)
    elif X.ndim != 3:
        raise bad_argument("states", tuple(X.shape), "a Trajectory, or states of shape (steps+1, prompts, tokens, d)")
    if lengths is None:
        lengths = [X.shape[1]]
    if sum(lengths) != X.shape[1]:
        raise bad_argument("lengths", list(lengths), f"prompt lengths summing to the {X.shape[1]} tokens")
    zero = torch.linalg.vector_norm(X, dim=-1) == 0
    if bool(zero.any()):
        s, i = (int(v) for v in torch.nonzero(zero)[0])
        raise bad_argument("states", f"zero vector at step {s}, token {i}",
                           "non-zero tokens (a correlation with a zero vector is undefined)")
    if step_layers is None:
        step_layers = list(range(X.shape[0] - 1))
    if len(step_layers) != X.shape[0] - 1:
        raise bad_argument("step_layers", list(step_layers), f"one layer id per step ({X.shape[0] - 1})")
    return X, list(lengths), [int(k) for k in step_layers], dict(options or {})


def alignment_stats(states, spectra: Spectra, *, spectra_layers: Sequence[int] | None = None,
                    step_layers: Sequence[int] | None = None, matrices: torch.Tensor | None = None,
                    lengths: Sequence[int] | None = None, cumulative: bool = True, bins: int = 20,
                    variant: str = "controlled", options: dict | None = None, progress: bool | str = False,
                    ci: float = 0.95, bootstrap: int = 1000, ci_seed: int = 0) -> AlignmentStats:
    """Power-method statistics of every step of a token trajectory.

    ``states``: a :class:`~steerformer.dynamics.Trajectory`, a
    :class:`~steerformer.stats.HiddenStates`, or a tensor (steps+1, P, n, d). ``spectra`` holds the
    eigen-decomposition of the layers ``spectra_layers`` (default 0..L-1), e.g. ``spectra(layer_matrices(m))``;
    ``step_layers`` maps each step to its layer (a Trajectory brings its own, repeats included for
    prolonged runs). ``matrices`` (aligned with ``spectra_layers``) enables the cumulative-product
    statistic; without it, or with ``cumulative=False``, it is skipped. ``progress``: a tqdm bar
    over the steps (a string labels it). ``ci``: level of the percentile-bootstrap intervals over
    prompts (``bootstrap`` resamples drawn with ``ci_seed``; :mod:`.uncertainty`), 0 for none.
    """
    X, lengths, step_layers, options = _flatten(states, lengths, step_layers, options)
    L = len(spectra)
    spectra_layers = list(range(L)) if spectra_layers is None else [int(k) for k in spectra_layers]
    if len(spectra_layers) != L:
        raise bad_argument("spectra_layers", spectra_layers, f"one layer id per spectrum ({L})")
    pos = {k: i for i, k in enumerate(spectra_layers)}
    missing = sorted(set(step_layers) - set(pos))
    if missing:
        raise bad_argument("step_layers", missing, f"layers whose spectra were computed ({spectra_layers})",
                           "Compute the spectra of every layer the trajectory runs.")
    d = spectra.eigenvectors.shape[-2]  # rows: factored spectra have r < d columns
    if X.shape[-1] != d:
        raise bad_argument("states", f"tokens of width {X.shape[-1]}", f"width d={d} of the layer matrices")
    if not isinstance(bins, (int, np.integer)) or bins < 1:
        raise bad_argument("bins", bins, "a positive number of histogram bins")
    if ci:  # checked before the work, not after it
        bootstrap_intervals(torch.zeros((1, 1)), [1], level=ci, resamples=bootstrap, seed=ci_seed)
    cum_iter = None
    if cumulative and matrices is not None:
        mats = getattr(matrices, "matrices", matrices)
        cum_iter = cumulative_principal(mats[pos[k]] for k in step_layers)

    cache: dict[int, tuple[Directions, torch.Tensor, str]] = {}
    records, tokens = [], {name: [] for name in PER_TOKEN}
    sums: list[tuple[list[str], torch.Tensor]] = []  # per step: (CI columns, per-prompt sums)
    dist0 = intertoken_distance(X[0].double(), lengths)
    for k in progress_bar(progress, "statistics", range(len(step_layers)), unit="layer"):
        i = pos[step_layers[k]]
        if i not in cache:
            vals, vecs = spectra.eigenvalues[i], spectra.eigenvectors[i]
            S, kind = principal_subspace(vals, vecs, spectra.index2[i])
            cache[i] = (eigen_directions(vals, vecs), S, kind)
        dirs, S, kind = cache[i]
        extra, cum_complex = None, None
        if cum_iter is not None:
            _, extra, cum_complex = next(cum_iter)
        rec, tok, means = layer_statistics(X[k], X[k + 1], dirs, S, extra)
        if ci:
            names = [c for c in CI_COLUMNS if c in means]
            sums.append((names, prompt_sums(torch.stack([means[c] for c in names]), lengths)))
        dmean, dmax = intertoken_distance(X[k + 1].double(), lengths)
        head = {"step": k, "layer": step_layers[k], "case": int(spectra.case[i]),
                "de_facto_case3": bool(spectra.de_facto_case3[i]),
                "lambda1_complex": lambda_is_complex(spectra.eigenvalues[i, 0], spectra.spectral_radius[i]),
                "subspace": kind}
        rec = {**head, **rec, "distance_mean": dmean, "distance_max": dmax}
        if cum_complex is not None:
            rec["cumulative_complex"] = bool(cum_complex)
        records.append(rec)
        for name, t in tok.items():
            tokens[name].append(t.cpu().numpy())
    if ci and records:
        _add_intervals(records, sums, lengths, level=ci, resamples=bootstrap, seed=ci_seed)
    per_token = {name: np.stack(v) for name, v in tokens.items() if v}
    hist = {"rho_v1": histogram(per_token["rho_re_v1"][-1], bins),
            "rho_S": histogram(per_token["rho_S"][-1], bins)} if records else {}
    meta = {"variant": variant, "n_tokens": int(X.shape[1]), "n_prompts": len(lengths), "n_steps": len(records),
            "distance_initial": {"mean": dist0[0], "max": dist0[1]}, "options": options,
            "cumulative": cum_iter is not None}
    if ci:
        meta["ci"] = {"level": float(ci), "method": "percentile bootstrap over prompts", "resamples": int(bootstrap),
                      "seed": int(ci_seed)}
    return AlignmentStats(meta=meta, layers=records, per_token=per_token, histograms=hist, lengths=lengths)
