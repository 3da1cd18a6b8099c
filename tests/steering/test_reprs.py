"""Values that hold tensors print as one short line: an edit, a record, a chain, a contrastive
direction (printing them used to dump every vector: thousands of lines)."""

from __future__ import annotations

from steerformer.steering import ContrastiveDirection, steer, steering_of

from tests.conftest import unit_vector
from tests.models import make_model


def test_edit_record_and_chain_print_one_short_line() -> None:
    model = make_model("gpt2")
    first = steer(model, unit_vector(64, 1), gain=2.5, solve="exact", report=False)
    rec = steer(model, unit_vector(64, 2), gain=-1.25, layer=0, solve="exact")
    chain = steering_of(model)
    for value, words in ((rec.edit, ["Edit(steer", rec.edit.module, "layer 0", "gain=-1.25", "d=64", "applied"]),
                         (rec, ["SteeringRecord(", "layer 0", "gain=-1.25", "1 edit(s)", f"{rec.kl:.4g}"]),
                         (first, ["layer 1", "gain=2.5", "kl=n/a"]),
                         (chain, ["Steering(2 call(s)", "steer layer 1", "steer layer 0", "2 edit(s) of 2 weight(s)"])):
        text = repr(value)
        assert "\n" not in text and len(text) < 200, text
        assert all(w in text for w in words), (text, words)
    assert str(rec.edit) == repr(rec.edit)  # print() shows the same line


def test_contrastive_direction_prints_one_short_line() -> None:
    d = ContrastiveDirection(vector=unit_vector(384, 3), method="pca", layer=2, token="mean", n_positive=3,
                             n_negative=3, positive_sha256="0" * 64, negative_sha256="1" * 64, raw_norm=1.5,
                             explained=0.5)
    text = repr(d)
    assert "\n" not in text and len(text) < 200, text
    assert all(w in text for w in ("pca", "layer 2", "token=mean", "3+/3-", "d=384")), text
