"""Why ``solve="exact"`` lands on the wrong side on MiniLM (issue 19; docs/statistics.md).

Setting of ``benchmarks/steer_modes.py``, row "toward, exact": a random unit u (seed 0), the left
vector w = the unit mean of the states entering the last layer on the reference sentences, strength
10 (γ = 10·|λ1|), the last layer's W_O edited by ΔW_O = γ u a with a = wᵀV⁻¹ (aV = wᵀ for the
stacked value map V).

The edit adds c_i·u to token i's attention output, c_i = γ a·z_i with z_i = [Σ_j A^h_ij (V_h x_j +
b_V,h)]_h the heads' outputs before W_O. Writing x̄_i^h = Σ_j A^h_ij x_j (head h's average) and x̄_i
their mean over heads, and using aV = wᵀ:

    a·z_i =  wᵀ x̄_i                       what the stacked-V picture predicts
          +  Σ_h a_h V_h (x̄_i^h − x̄_i)     heads that attend differently
          +  a·b_V                          the value bias

Printed: the three parts per unit gain (c/γ, mean over the held-out tokens), checked against c
measured with hooks (the edited minus the unedited attention output, along u); then the mean signed
cos(h, u) of the final states on the held-out sentences for the edit as it is, with every head of
the edited layer given the head-averaged attention, with the bias part removed (``compensate_bias``)
and with both.

Run: python benchmarks/exact_wrong_side.py [--smoke]  (--smoke: two held-out sentences)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from steerformer.attention import attention_probs  # noqa: E402
from steerformer.loading import bundled_minilm_path, load_model, open_source  # noqa: E402
from steerformer.matrices import read_attention_weights  # noqa: E402
from steerformer.steering import steer, unsteer  # noqa: E402
from steerformer.steering.measure import HELDOUT_SENTENCES, REFERENCE_SENTENCES  # noqa: E402


def states(model, tok, texts, index: int) -> list[torch.Tensor]:
    """hidden_states[index] of each sentence's real tokens, one (n, d) float64 tensor per sentence."""
    out = []
    for t in texts:
        enc = tok([t], return_tensors="pt")
        with torch.no_grad():
            out.append(model(**enc, output_hidden_states=True).hidden_states[index][0].to(torch.float64))
    return out


def signed_cos(model, tok, texts, u: torch.Tensor) -> float:
    h = torch.cat(states(model, tok, texts, -1))
    return float((h @ u / h.norm(dim=-1)).mean())


@contextlib.contextmanager
def head_averaged_attention(attn_module):
    """Every head of this BertSelfAttention uses the mean over heads of the attention matrices."""
    m = attn_module

    def forward(hidden_states, attention_mask=None, *args, **kwargs):
        shape = (*hidden_states.shape[:-1], -1, m.attention_head_size)
        q, k, v = (lin(hidden_states).view(shape).transpose(1, 2) for lin in (m.query, m.key, m.value))
        scores = q @ k.transpose(-1, -2) * m.scaling
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask, float("-inf")) if attention_mask.dtype == torch.bool \
                else scores + attention_mask
        probs = torch.softmax(scores, dim=-1).mean(1, keepdim=True)
        out = (probs @ v).transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
        return out, probs

    m.forward = forward
    try:
        yield
    finally:
        del m.forward


def main(smoke: bool = False) -> None:
    from transformers import AutoTokenizer

    heldout = HELDOUT_SENTENCES[:2] if smoke else HELDOUT_SENTENCES
    tok = AutoTokenizer.from_pretrained(str(bundled_minilm_path()))
    model = load_model("minilm")
    L = model.config.num_hidden_layers - 1
    layer = model.encoder.layer[L].attention
    u = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u /= u.norm()
    left = torch.cat(states(model, tok, REFERENCE_SENTENCES, -2)).mean(0)
    w = read_attention_weights(open_source(model), [L])[L]
    xs = states(model, tok, heldout, -2)  # what the last layer reads (the edit does not change it)

    captured: list[torch.Tensor] = []
    hook = layer.output.dense.register_forward_hook(lambda mod, inp, out: captured.append(out[0].to(torch.float64)))
    for x in xs:  # unedited attention outputs
        with torch.no_grad():
            layer(x[None].to(layer.output.dense.weight.dtype))
    rec = steer(model, u, strength=10.0, solve="exact", left=left, report=False)
    edit = rec.edits[0]
    for x in xs:  # edited
        with torch.no_grad():
            layer(x[None].to(layer.output.dense.weight.dtype))
    hook.remove()
    n = len(xs)
    c_measured = torch.cat([(after - before) @ u for before, after in zip(captured[:n], captured[n:])])

    gamma, a = float(edit.gain), edit.a.to(torch.float64)
    wv = (edit.w if edit.w is not None else left / left.norm()).to(torch.float64)
    H, dh = w.n_heads, w.W_V.shape[1]
    a_h = a.reshape(H, dh)
    V = w.value_heads().to(torch.float64)  # (H, d_h, d)
    parts = {"wx": [], "heads": [], "bias": []}
    for x in xs:
        A = attention_probs(x, w).to(torch.float64)  # (H, n, n), the layer's own weights
        xbar_h = A @ x  # (H, n, d)
        xbar = xbar_h.mean(0)
        aV = torch.einsum("hk,hkd->d", a_h, V)
        parts["wx"].append(xbar @ aV)
        parts["heads"].append(torch.einsum("hk,hkd,hnd->n", a_h, V, xbar_h - xbar))
        parts["bias"].append(torch.full((x.shape[0],), float(a @ w.value_bias_heads().to(torch.float64))))
    parts = {k: torch.cat(v) for k, v in parts.items()}
    total = parts["wx"] + parts["heads"] + parts["bias"]
    check = float((total - c_measured / gamma).abs().max() / c_measured.abs().max() * gamma)
    print(f"MiniLM, last layer ({L}), exact solve, strength 10: γ = {gamma:.4g}, ‖aV − wᵀ‖/‖w‖ = "
          f"{float((torch.einsum('hk,hkd->d', a_h, V) - wv).norm() / wv.norm()):.1e}, "
          f"{c_measured.numel()} held-out tokens")
    print("| part of a·z = c/γ (mean over held-out tokens) | value |")
    print("|---|---|")
    print(f"| heads with different attention, Σ_h a_h V_h (x̄^h − x̄) | {float(parts['heads'].mean()):+.2f} |")
    print(f"| value bias, a·b_V | {float(parts['bias'].mean()):+.2f} |")
    print(f"| wᵀx̄ (what the stacked-V picture predicts) | {float(parts['wx'].mean()):+.2f} |")
    print(f"| total a·z | {float(total.mean()):+.2f} |")
    print(f"check: the parts against c measured with hooks, max relative difference {check:.1e}")
    # the suite's one convention for a benchmark (a ratio against a baseline run here): the
    # decomposition's mean total against the hook-measured mean c/γ
    print(f"ratio of the decomposition's total to the hook-measured a·z: "
          f"{float(total.mean()) / float((c_measured / gamma).mean()):.6f}")

    rows = [("edit as it is", False, False)]
    unsteer(model)
    base = signed_cos(model, tok, heldout, u)
    rows += [("every head of the edited layer given the head-averaged attention", True, False),
             ("bias part removed (compensate_bias)", False, True), ("both", True, True)]
    print(f"\nsigned cos(h, u) of the final states, mean over the held-out tokens (unsteered {base:+.3f}):")
    for name, avg, comp in rows:
        steer(model, u, strength=10.0, solve="exact", left=left, compensate_bias=comp, report=False)
        ctx = head_averaged_attention(layer.self) if avg else contextlib.nullcontext()
        with ctx:
            cos = signed_cos(model, tok, heldout, u)
        unsteer(model)
        print(f"  {name}: {cos:+.3f}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="two held-out sentences")
    main(ap.parse_args().smoke)
