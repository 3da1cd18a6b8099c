"""Confidence intervals of the power-method statistics (docs/math.md §4c): a percentile bootstrap over
prompts.

Every statistic of §4 is a mean over tokens (the baselines: over tokens and eigen-directions, i.e.
a mean over tokens of each token's mean over directions). Tokens within a prompt are not
independent — the layers mix them — so the resampling unit is the prompt: one resample draws P
prompts with replacement, and a statistic of the resample is Σ_p c_p s_p / Σ_p c_p n_p, with c_p
the prompt's count in the resample, s_p the sum of the per-token values over the prompt's tokens
and n_p its length (prompts of the full-model variant differ in length). All statistics and all
steps share the same B resamples (one seed), so the B × (steps · statistics) bootstrap values are
one matrix product. The interval is the (1 − level)/2 and (1 + level)/2 quantiles of the
resampled values.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..errors import bad_argument


def prompt_sums(values: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """Sums over each prompt's tokens: ``values`` (S, N) with prompts of ``lengths`` consecutive
    tokens → (S, P), float64, on the values' device."""
    v = values.to(torch.float64)
    if len(set(lengths)) == 1:
        return v.reshape(v.shape[0], len(lengths), lengths[0]).sum(-1)
    index = torch.repeat_interleave(torch.arange(len(lengths), device=v.device),
                                    torch.as_tensor(list(lengths), device=v.device))
    out = torch.zeros((v.shape[0], len(lengths)), dtype=torch.float64, device=v.device)
    return out.index_add_(1, index, v)


def resample_counts(n_prompts: int, resamples: int, seed: int) -> torch.Tensor:
    """(B, P) how often each prompt occurs in each of B resamples with replacement (seeded)."""
    g = torch.Generator().manual_seed(int(seed))
    draws = torch.randint(n_prompts, (resamples, n_prompts), generator=g)
    counts = torch.zeros((resamples, n_prompts), dtype=torch.float64)
    return counts.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))


def bootstrap_intervals(sums: torch.Tensor, lengths: Sequence[int], *, level: float, resamples: int,
                        seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile intervals (lo, hi), each shaped like ``sums[..., 0]``, of the ratio statistics
    Σ_p s_p / Σ_p n_p given per-prompt sums ``sums`` (..., P). NaN where a statistic is NaN."""
    if not 0 < level < 1:
        raise bad_argument("ci", level, "a confidence level in (0, 1), e.g. 0.95 (0 turns the intervals off)")
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < 1:
        raise bad_argument("bootstrap", resamples, "a positive number of resamples, e.g. 1000")
    shape = sums.shape[:-1]
    S = sums.detach().to("cpu", torch.float64).reshape(-1, sums.shape[-1])
    C = resample_counts(len(lengths), int(resamples), seed)
    n = torch.as_tensor(list(lengths), dtype=torch.float64)
    values = (C @ S.T) / (C @ n)[:, None]  # (B, statistics)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    lo, hi = torch.quantile(values, q, dim=0)
    return lo.reshape(shape).numpy(), hi.reshape(shape).numpy()
