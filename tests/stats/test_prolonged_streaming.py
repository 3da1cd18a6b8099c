"""The prolonged statistics, streamed one pass at a time, equal those of the whole trajectory."""

from __future__ import annotations


import pytest



def _spectra_of(model):
    from steerformer import layer_matrices, spectra

    return spectra(layer_matrices(model))


def test_prolonged_statistics_streamed_pass_by_pass_equal_the_whole_trajectory(monkeypatch):
    """power_method_stats' prolonged run, streamed one pass at a time, gives exactly the statistics
    of the whole K-pass trajectory computed in one piece (run_dynamics(repeat=K) +
    alignment_stats), and never holds more than one pass's states."""
    import numpy as np

    import steerformer.stats.run as run_mod
    from steerformer.dynamics import run_dynamics
    from steerformer.stats import alignment_stats, power_method_stats
    from tests.models import make_model

    model = make_model("albert")
    held = []
    real = run_mod.run_dynamics

    def spy(*a, **k):
        traj = real(*a, **k)
        held.append(traj.states.shape[0])
        return traj

    monkeypatch.setattr(run_mod, "run_dynamics", spy)
    K = 3
    rep = power_method_stats(model, n_prompts=3, n_tokens=4, prolong=K, null_draws=0, full_model=False,
                             layer_norm=False, seed=5)
    L = len(rep.controlled.layers)
    assert max(held) == L + 1  # one pass of states at a time, whatever K
    whole = run_dynamics(model, n_prompts=3, n_tokens=4, seed=5, repeat=K)
    ref = alignment_stats(whole, _spectra_of(model),
                          cumulative=False, variant="prolonged", spectra_layers=list(range(L)))
    got = rep.prolonged
    assert len(got.layers) == K * L == len(ref.layers)
    for a, b in zip(got.layers, ref.layers):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-12) if isinstance(a[key], float) else a[key] == b[key]
    for name in ref.per_token:
        np.testing.assert_allclose(got.per_token[name], ref.per_token[name], rtol=1e-12, atol=1e-12)
    assert got.meta["options"]["repeat"] == K and got.meta["n_steps"] == K * L
    assert got.meta == {**ref.meta, "options": got.meta["options"]} and got.meta["options"] == ref.meta["options"]
    assert got.histograms == ref.histograms  # of the last step of the last pass
    assert [r["step"] for r in got.layers] == list(range(K * L))
