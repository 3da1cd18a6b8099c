"""Confidence intervals over prompts (docs/math.md §4c): the bootstrap's matrix form against a loop over
resamples, its coverage when tokens within a prompt are correlated, and the intervals of
`alignment_stats` against the per-token values it saved."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from steerformer.dynamics import run_dynamics
from steerformer.errors import InvalidArgumentError
from steerformer.loading import open_source
from steerformer.matrices import layer_matrices
from steerformer.spectra import spectra
from steerformer.stats import alignment_stats
from steerformer.stats.result import CI_COLUMNS
from steerformer.stats.uncertainty import bootstrap_intervals, prompt_sums
from tests.models import make_model


def _loop_interval(values: np.ndarray, lengths: list[int], B: int, seed: int, level: float):
    """Resample by resample: the same draws (torch.randint with the seed), the tokens of the drawn
    prompts pooled, their mean; then the two quantiles."""
    starts = np.cumsum([0] + lengths)
    draws = torch.randint(len(lengths), (B, len(lengths)), generator=torch.Generator().manual_seed(seed)).numpy()
    means = [np.concatenate([values[starts[p]:starts[p + 1]] for p in row]).mean() for row in draws]
    return np.quantile(means, [(1 - level) / 2, (1 + level) / 2])


@pytest.mark.parametrize("lengths", [[5] * 8, [3, 7, 1, 4, 6, 2]])
def test_bootstrap_intervals_equal_a_loop_over_resamples(lengths) -> None:
    rng = np.random.default_rng(0)
    v = rng.standard_normal(sum(lengths))
    lo, hi = bootstrap_intervals(prompt_sums(torch.from_numpy(v)[None], lengths), lengths, level=0.9,
                                 resamples=500, seed=7)
    ref = _loop_interval(v, lengths, 500, 7, 0.9)
    assert lo[0] == pytest.approx(ref[0], abs=1e-12) and hi[0] == pytest.approx(ref[1], abs=1e-12)


def test_intervals_over_prompts_cover_at_the_nominal_rate_when_tokens_share_their_prompt() -> None:
    """Each prompt adds its own offset to all its tokens: a token-level bootstrap would be far too
    narrow; resampling prompts covers the true mean (0) in about 95 % of repeats."""
    rng = np.random.default_rng(1)
    P, n, reps = 40, 10, 300
    x = rng.standard_normal((reps, P, 1)) + 0.3 * rng.standard_normal((reps, P, n))
    sums = torch.from_numpy(x.sum(-1))  # (reps, P): one statistic per repeat
    lo, hi = bootstrap_intervals(sums, [n] * P, level=0.95, resamples=1000, seed=0)
    cover = float(np.mean((lo <= 0) & (0 <= hi)))
    assert 0.90 <= cover <= 0.985


def test_alignment_stats_intervals_match_the_saved_per_token_values(tmp_path) -> None:
    model = make_model("bert", hidden_size=32, num_attention_heads=4)
    src = open_source(model)
    lm = layer_matrices(src)
    st = alignment_stats(run_dynamics(src, n_prompts=12, n_tokens=6, seed=1), spectra(lm), matrices=lm,
                         ci=0.9, bootstrap=400, ci_seed=3)
    lengths = [6] * 12
    for k, rec in enumerate(st.layers):
        delta = st.per_token["rho"][k] - st.per_token["rho_before"][k]
        ref = _loop_interval(delta, lengths, 400, 3, 0.9)
        assert (rec["delta_rho_mean_lo"], rec["delta_rho_mean_hi"]) == pytest.approx(tuple(ref), abs=1e-12)
        ref = _loop_interval((delta > 0).astype(float), lengths, 400, 3, 0.9)
        assert (rec["P_lo"], rec["P_hi"]) == pytest.approx(tuple(ref), abs=1e-12)
        for c in CI_COLUMNS:
            assert rec[f"{c}_lo"] <= rec[c] + 1e-12 and rec[c] <= rec[f"{c}_hi"] + 1e-12, c
        assert rec["baseline_P_lo"] < rec["baseline_P_hi"]
    assert st.meta["ci"] == {"level": 0.9, "method": "percentile bootstrap over prompts", "resamples": 400, "seed": 3}
    paths = st.save(tmp_path, plots=False)
    head = paths["csv"].read_text().splitlines()[0].split(",")
    assert {"delta_rho_mean_lo", "P_hi", "baseline_P_lo", "cumulative_rho_mean_hi"} <= set(head)
    assert "rho_mean_lo" in json.loads(paths["json"].read_text())["layers"][0]
    off = alignment_stats(run_dynamics(src, n_prompts=3, n_tokens=2), spectra(lm), ci=0)
    assert "rho_mean_lo" not in off.layers[0] and "ci" not in off.meta
    with pytest.raises(InvalidArgumentError, match="ci=1.5"):
        alignment_stats(run_dynamics(src, n_prompts=3, n_tokens=2), spectra(lm), ci=1.5)
