"""Attention of one layer computed from its canonical weights (pure tensor functions).

Tokens travel as rows here, shape (..., n, d), so that prompts batch along leading axes; the
math is the papers' column form transposed: out_i = sum_h W_O[h] W_V[h] sum_j A^h_ij x_j.
"""

from __future__ import annotations

import torch

from .adapters.base import AttentionWeights


def attention_probs(x: torch.Tensor, w: AttentionWeights) -> torch.Tensor:
    """Attention matrices A^h (rows sum to 1) for tokens ``x`` (..., n, d) → (..., H, n, n).

    Uses the layer's own query/key weights and biases, its query/key norm modules, its position
    rotation (positions 0..n−1), its own score scale, soft-cap and mask (docs/math.md §1b, in the
    order the models apply them). Grouped-query heads read key head g(h).
    """
    if w.W_Q is None or w.W_K is None:
        raise ValueError("these AttentionWeights were read without their query/key part (parts=('vo',))")
    q = torch.einsum("...nd,hkd->...hnk", x, w.W_Q)
    k = torch.einsum("...nd,hkd->...hnk", x, w.W_K)
    if w.b_Q is not None:
        q = q + w.b_Q[:, None, :]
    if w.b_K is not None:
        k = k + w.b_K[:, None, :]
    if w.q_norm is not None:
        q = w.q_norm(q)
    if w.k_norm is not None:
        k = w.k_norm(k)
    if w.positions is not None:
        q, k = w.positions.apply(q, k)
    if w.n_kv_heads != w.n_heads:
        k = k[..., w.kv_index(), :, :]
    scores = (q @ k.transpose(-1, -2)) * w.scale
    if w.positions is not None and hasattr(w.positions, "score_bias"):  # ALiBi
        scores = scores + w.positions.score_bias(x.shape[-2], scores.dtype, scores.device)
    if w.softcap is not None:
        scores = torch.tanh(scores / w.softcap) * w.softcap
    n = x.shape[-2]
    if w.mask.kind != "full":
        scores = scores.masked_fill(~w.mask.allowed(n, device=x.device), float("-inf"))
    return torch.softmax(scores, dim=-1)


def attention_output(x: torch.Tensor, w: AttentionWeights, probs: torch.Tensor | None = None, *,
                     bias: bool = True) -> torch.Tensor:
    """The attention sublayer's output sum_h M_h A^h x (+ W_O b_V + b_O), rows (..., n, d).

    Computed value-first (x V_hᵀ, then A^h, then W_O[h]): H·n·d·d_h flops per map instead of the
    H·n·d² of forming each M_h, the same numbers up to rounding.
    """
    A = attention_probs(x, w) if probs is None else probs
    v = torch.einsum("...nd,hkd->...hnk", x, w.W_V)
    if w.n_kv_heads != w.n_heads:
        v = v[..., w.kv_index(), :, :]
    out = torch.einsum("...hnk,hdk->...nd", A @ v, w.W_O)
    if bias:
        out = out + w.output_bias()
    return out
