"""The lazy path's cheap checks: the finiteness check on every dtype the reader returns, the
grouped-query factors against a loop over heads, and the import diet of the lazy paths."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from steerformer.adapters.base import AttentionWeights, MaskSpec, split_output_heads
from steerformer.errors import CheckpointError
from steerformer.loading import _check_finite


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_check_finite_matches_isfinite(dtype):
    g = torch.Generator().manual_seed(0)
    for n in (1, 7, 64, 129, 5000):
        _check_finite(torch.randn(n, generator=g).to(dtype), "w", "here")  # finite: passes
        for bad in (float("nan"), float("inf"), -float("inf")):
            t = torch.randn(n, generator=g).to(dtype)
            pos = int(torch.randint(n, (1,), generator=g))
            t[pos] = bad
            assert not bool(torch.isfinite(t).all())  # the reference answer
            with pytest.raises(CheckpointError, match="1 non-finite"):
                _check_finite(t.reshape(1, -1), "w", "here")
    _check_finite(torch.empty(0, dtype=dtype), "w", "here")  # empty: nothing to check
    _check_finite(torch.tensor([2**62], dtype=torch.int64), "w", "here")  # integers are not checked


@pytest.mark.parametrize("H,G", [(6, 6), (6, 2), (8, 1), (6, 4)])
def test_layer_factors_sum_heads_like_a_loop(H, G):
    """F = A B equals Σ_h W_O[h] W_V[g(h)] with g(h) = h·G // H, including uneven groups."""
    g = torch.Generator().manual_seed(1)
    d, dh = 12, 3
    W_O = split_output_heads(torch.randn(d, H * dh, generator=g, dtype=torch.float64), H)
    W_V = torch.randn(G, dh, d, generator=g, dtype=torch.float64)
    w = AttentionWeights(W_V=W_V, b_V=None, W_O=W_O, b_O=None, scale=1.0, mask=MaskSpec("full"))
    A, B = w.layer_factors()
    ref = sum(W_O[h] @ W_V[h * G // H] for h in range(H))
    assert A.shape == (d, G * dh) and B.shape == (G * dh, d)
    torch.testing.assert_close(A @ B, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.layer_matrix(), ref, rtol=1e-12, atol=1e-12)


def test_lazy_paths_import_no_model_code():
    """open_source on a folder, layer_matrices' module and the lazy steering module leave
    transformers' modeling code (torch._dynamo, torch.distributed, scipy.optimize through its
    losses: ~150 MB resident) and matplotlib unimported — the lazy paths' RSS floor."""
    code = (
        "import sys, steerformer\n"
        "steerformer.layer_matrices\n"
        "from steerformer.loading import open_source\n"
        "open_source('minilm')\n"
        "import steerformer.steering.checkpoint\n"
        "print(sorted(m for m in ('transformers.modeling_utils', 'matplotlib', 'scipy.optimize', 'torch._dynamo')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_one_device_check():
    """eig.resolve_device is loading.check_device limited to cpu/cuda: same device, same refusals."""
    from steerformer.errors import InvalidArgumentError
    from steerformer.eig import resolve_device
    from steerformer.loading import check_device

    assert resolve_device(None) == check_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for bad in ("quantum", "cuda:99"):
        with pytest.raises(InvalidArgumentError, match=f"device='{bad}' is invalid"):
            resolve_device(bad)
        with pytest.raises(InvalidArgumentError, match=f"--device='{bad}' is invalid"):
            check_device(bad, name="--device")
    with pytest.raises(InvalidArgumentError, match="device='meta' is invalid: expected 'cpu' or 'cuda'"):
        resolve_device("meta")  # a real torch device, but no eigen-solver runs there


def test_prolonged_statistics_streamed_pass_by_pass_equal_the_whole_trajectory(monkeypatch):
    """power_method_stats' prolonged run, streamed one pass at a time, gives exactly the statistics
    of the whole K-pass trajectory computed in one piece (run_dynamics(repeat=K) +
    alignment_stats), and never holds more than one pass's states."""
    import numpy as np

    import steerformer.stats.run as run_mod
    from steerformer.dynamics import run_dynamics
    from steerformer.stats import alignment_stats, power_method_stats
    from tests.tiny_models import make_model

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


def _spectra_of(model):
    from steerformer import layer_matrices, spectra

    return spectra(layer_matrices(model))
