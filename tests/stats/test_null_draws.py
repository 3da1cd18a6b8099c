"""The null model's draws (docs/math.md §4b, §4c), batched, against an independent path: each draw's
weights written into the controlled dynamics one draw at a time, and each random layer's principal
eigenvector from the full sorted spectrum — for encoders, decoders with rotary grouped-query
attention, query/key norms, score caps, ALiBi, local masks and shared weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steerformer.dynamics import run_dynamics
from steerformer.loading import open_source
from steerformer.matrices import read_attention_weights
from steerformer.spectra import layer_spectrum, spectral_summary
from steerformer.stats.eigenbasis import eigen_directions
from steerformer.stats.null import null_statistics, null_weights, principal_bases
from tests.models import make_model
from tests.models import make_model


def _reference(src, weights, tokens, draws, layer_norm=False):
    """Draw by draw: the dynamics of null_weights(draw), ρ against group 0 of the full spectrum."""
    ids = sorted(weights)
    delta, P = np.zeros((draws, len(ids))), np.zeros((draws, len(ids)))
    for s in range(draws):
        w = null_weights(weights, s)
        traj = run_dynamics(src, tokens, weights=w, normalize_initial=False, layer_norm=layer_norm)
        for step, k in enumerate(ids):
            vals, vecs, _ = layer_spectrum(factors=w[k].layer_factors())
            dirs = eigen_directions(vals, vecs)
            basis = dirs.basis[:, [int(dirs.first[0]), int(dirs.second[0])]] if dirs.is_pair[0] \
                else dirs.basis[:, [int(dirs.first[0])]]
            rho = [torch.linalg.vector_norm(x.reshape(-1, x.shape[-1]) @ basis, dim=-1)
                   / torch.linalg.vector_norm(x.reshape(-1, x.shape[-1]), dim=-1)
                   for x in (traj.states[step], traj.states[step + 1])]
            d = rho[1] - rho[0]
            delta[s, step], P[s, step] = float(d.mean()), float((d > 0).double().mean())
    return delta, P


MODELS = {
    "bert": lambda: make_model("bert", hidden_size=32, num_attention_heads=4),
    "albert-shared": lambda: make_model("albert", hidden_size=32, num_attention_heads=4, num_hidden_layers=3),
    "gpt_neo-local": lambda: make_model("gpt_neo", hidden_size=32, num_heads=4),
    **{f: (lambda f=f: make_model(f)) for f in ("llama", "qwen3", "gemma2", "bloom")},
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_batched_draws_equal_the_draws_run_one_at_a_time(name) -> None:
    src = open_source(MODELS[name]())
    weights = read_attention_weights(src)
    tokens = run_dynamics(src, n_prompts=4, n_tokens=5, seed=3, layers=[0]).states[0]
    layer_norm = name == "llama"  # the model's own RMSNorm before attention, vmapped too
    got = null_statistics(src, weights, tokens, sorted(weights), 5, chunk=2, layer_norm=layer_norm)
    ref_delta, ref_P = _reference(src, weights, tokens, 5, layer_norm)
    assert np.allclose(got["delta"], ref_delta, rtol=0, atol=1e-12)
    assert np.array_equal(got["P"], ref_P)
    one = null_statistics(src, weights, tokens, sorted(weights), 5, chunk=5, layer_norm=layer_norm)
    assert np.allclose(one["delta"], got["delta"], rtol=0, atol=1e-12)


def test_shared_layers_share_their_draw_and_each_draw_has_its_own_seed() -> None:
    src = open_source(make_model("albert", hidden_size=32, num_attention_heads=4, num_hidden_layers=3))
    w = read_attention_weights(src)
    a, b = null_weights(w, 0), null_weights(w, 1)
    assert a[0].W_Q is a[2].W_Q  # one slot, one draw
    assert not torch.equal(a[0].W_Q, b[0].W_Q)
    assert torch.equal(null_weights(w, 1)[1].W_O, b[1].W_O)  # reproducible


def test_principal_basis_of_a_rank_deficient_F_with_only_negative_eigenvalues_is_a_null_vector() -> None:
    """W_O[h] = −W_V[g(h)]ᵀ: F is negative semidefinite of rank r < d, so its rightmost eigenvalue is
    F's zero (docs/math.md §1b) and v1 a null vector — as the dense, sorted spectrum says."""
    model = make_model("llama")
    w = read_attention_weights(open_source(model))[0]
    W_O = -w.W_V[w.kv_index()].transpose(-1, -2).contiguous()
    B = principal_bases(w, torch.stack([w.W_V, w.W_V]), torch.stack([W_O, -W_O]))
    import dataclasses

    for i, sign in enumerate((1, -1)):
        F = dataclasses.replace(w, W_O=sign * W_O).layer_matrix()
        vals, vecs, _ = layer_spectrum(F)
        q = B[i][:, 0]
        if sign == 1:
            assert spectral_summary(vals).lambda1 == 0 and float(torch.linalg.vector_norm(F @ q)) <= 1e-12
        else:  # the positive semidefinite twin: v1 is the top eigenvector
            assert abs(float(vecs[:, 0].real @ q)) == pytest.approx(1.0, abs=1e-10)
        assert float(B[i][:, 1].abs().max()) == 0.0
