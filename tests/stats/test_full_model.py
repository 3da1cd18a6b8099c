"""Full-model variant: states are the model's own output_hidden_states; MiniLM end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from steerformer import layer_matrices, open_source, run_dynamics, spectra
from steerformer.errors import InvalidArgumentError
from steerformer.stats import COLUMNS, alignment_stats
from steerformer.stats.full_model import model_hidden_states

from tests.models import make_model




@pytest.mark.parametrize("family", ["gpt2", "bert", "albert"])
def test_full_model_states_equal_per_prompt_hidden_states(family: str) -> None:
    model = make_model(family)
    ids = [[5, 7, 9, 11, 13], [3, 4], [8, 8, 8, 1, 2, 6, 7]]  # ragged: the batch pads them
    hs = model_hidden_states(model, input_ids=ids, batch_size=2)
    assert hs.lengths == [5, 2, 7] and hs.states.shape[0] == model.config.num_hidden_layers + 1
    start = 0
    for seq in ids:
        with torch.no_grad():
            ref = model.base_model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
        got = hs.states[:, start:start + len(seq)]
        assert torch.allclose(got, torch.stack(ref)[:, 0].double(), atol=1e-10)
        start += len(seq)


def test_full_model_bad_prompts(tmp_path) -> None:
    model = make_model("bert")  # 64 positions
    with pytest.raises(InvalidArgumentError, match=r"prompt 1 with 70 tokens.*at most 64"):
        model_hidden_states(model, input_ids=[[1, 2], list(range(1, 71))])
    empty = tmp_path / "prompts.txt"
    empty.write_text("\n  \n")
    with pytest.raises(InvalidArgumentError, match="at least one non-blank line"):
        model_hidden_states("minilm", empty)
    with pytest.raises(InvalidArgumentError, match="input_ids"):
        model_hidden_states(model, input_ids=[[1, 500]])


@pytest.fixture(scope="module")
def minilm():
    src = open_source("minilm")
    lm = layer_matrices(src)
    return src, lm, spectra(lm)


def test_minilm_end_to_end_finite_probabilities_and_schema(minilm, tmp_path) -> None:
    src, lm, sp = minilm
    assert lm.d_model == 384 and len(lm) == 6
    controlled = alignment_stats(run_dynamics(src, n_prompts=20, n_tokens=10, seed=0), sp, matrices=lm)
    hs = model_hidden_states(src, ["The cat sat on the mat.", "Power iteration aligns vectors with eigenvectors."])
    full = alignment_stats(hs, sp, matrices=lm, variant="full_model")
    for st in (controlled, full):
        assert len(st.layers) == 6
        for r in st.layers:
            for key, val in r.items():
                if isinstance(val, float):
                    assert np.isfinite(val), key
            for key in ("P", "baseline_P", "baseline1d_P"):
                assert 0.0 <= r[key] <= 1.0
            assert 0 <= r["rho_mean"] <= 1 and r["rho_S_mean"] >= r["rho_re_v1_mean"] - 1e-12
        d = json.loads(st.to_json())
        assert set(d) == {"meta", "summary", "layers", "histograms_last_layer"}
        assert list(d["layers"][0]) == list(COLUMNS[:COLUMNS.index("null_delta_mean")])  # no test, no seeds
        assert set(d["histograms_last_layer"]) == {"rho_v1", "rho_S"}
        assert sum(d["histograms_last_layer"]["rho_S"]["counts"]) == st.meta["n_tokens"]
    # The stable schema, spelled out: renaming a column must be a deliberate change of this list.
    assert COLUMNS == (
        "step", "layer", "case", "de_facto_case3", "lambda1_complex", "subspace",
        "rho_mean", "rho_std", "rho_before_mean", "rho_before_std", "delta_rho_mean", "delta_rho_std", "P",
        "rho_re_v1_mean", "rho_re_v1_std", "rho_S_mean", "rho_S_std", "subspace_dim", "rho_S_chance",
        "baseline_rho_mean", "baseline_rho_std", "baseline_delta_mean", "baseline_delta_std", "baseline_P",
        "baseline1d_rho_mean", "baseline1d_rho_std", "baseline1d_delta_mean", "baseline1d_delta_std", "baseline1d_P",
        "n_real_directions", "n_pair_directions", "numerical_rank",
        "cumulative_rho_mean", "cumulative_rho_std", "cumulative_complex",
        "distance_mean", "distance_max", "power_method_step",
        "rho_mean_lo", "rho_mean_hi", "rho_before_mean_lo", "rho_before_mean_hi", "delta_rho_mean_lo",
        "delta_rho_mean_hi", "P_lo", "P_hi", "rho_re_v1_mean_lo", "rho_re_v1_mean_hi", "rho_S_mean_lo", "rho_S_mean_hi",
        "baseline_rho_mean_lo", "baseline_rho_mean_hi", "baseline_delta_mean_lo", "baseline_delta_mean_hi",
        "baseline_P_lo", "baseline_P_hi", "baseline1d_rho_mean_lo", "baseline1d_rho_mean_hi",
        "baseline1d_delta_mean_lo", "baseline1d_delta_mean_hi", "baseline1d_P_lo", "baseline1d_P_hi",
        "cumulative_rho_mean_lo", "cumulative_rho_mean_hi",
        "null_delta_mean", "null_delta_std", "null_delta_lo", "null_delta_hi",
        "null_P_mean", "null_P_std", "null_P_lo", "null_P_hi",
        "p_delta", "p_P", "p_delta_adjusted", "p_P_adjusted", "beyond_chance",
        "power_method_step_share", "beyond_chance_share", "unstable",
    )
    # On the real model the controlled dynamics act as power-method steps in most layers (paper §3.2).
    assert controlled.n_power_steps >= 4
    paths = controlled.save(tmp_path)
    assert all(p.exists() and p.stat().st_size > 0 for p in paths.values())
    assert (tmp_path / "alignment.csv").read_text().splitlines()[0].split(",") == list(COLUMNS)
