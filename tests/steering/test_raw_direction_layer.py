"""A raw direction (a vector, an eigenvector) has no concept tokens: the KL-calibrated steer does not
scan layers by their probability (it would read 0 everywhere and pick one anyway, at three times the
cost); it steers the given layer, or one default layer, and says which in the record and summary."""

from __future__ import annotations

import numpy as np
import torch

from steerformer.steering import steer, unsteer
from tests.models import make_model


def test_a_raw_direction_steers_one_default_layer_without_a_scan() -> None:
    torch.set_num_threads(1)
    model = make_model("gpt2", n_layer=10)
    u = np.random.default_rng(0).normal(size=model.config.n_embd)
    rec = steer(model, u, progress=False)
    cal = rec.details.to_dict()
    # the scan layers of a 10-layer model are round(0.4·9)=4 .. round(0.65·9)=6: 4, 5, 6; the middle one
    assert cal["layers"] == [5] and cal["scan"] is None
    assert cal["layer_choice"].startswith("default") and "no concept tokens" in cal["layer_choice"]
    assert "after layer(s) [5] (default" in rec.summary()
    unsteer(model)
    rec = steer(model, u, layer=7, progress=False)
    assert rec.details.layers == [7] and rec.details.layer_choice == "given"
