"""The grouped-query factors F = A B of a layer against a loop over its heads."""

from __future__ import annotations


import pytest
import torch

from steerformer.adapters.base import AttentionWeights, MaskSpec, split_output_heads


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
