"""Every bad input to steer() fails before any weight changes, naming the argument and the fix."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.steering import is_steered, steer

from tests.models import make_model


@pytest.fixture(scope="module")
def model():
    return make_model("gpt2")


def _unchanged(model, call) -> str:
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(InvalidArgumentError) as info:
        call()
    assert not is_steered(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    return str(info.value)


def test_direction_of_the_wrong_length_names_both_widths(model) -> None:
    msg = _unchanged(model, lambda: steer(model, np.ones(5), strength=1.0))
    assert "5 entries" in msg and "d_model=64" in msg


@pytest.mark.parametrize("bad,why", [([math.nan] + [1.0] * 63, "NaN/inf"), ([math.inf] + [0.0] * 63, "NaN/inf"),
                                     ([0.0] * 64, "zero vector")])
def test_non_finite_or_zero_direction(model, bad, why) -> None:
    assert why in _unchanged(model, lambda: steer(model, bad, strength=1.0))


def test_ragged_or_non_numeric_npy(model, tmp_path: Path) -> None:
    ragged = tmp_path / "ragged.npy"
    np.save(ragged, np.array([[1.0, 2.0], [3.0]], dtype=object), allow_pickle=True)
    assert "numeric .npy" in _unchanged(model, lambda: steer(model, str(ragged), strength=1.0))
    words = tmp_path / "words.npy"
    np.save(words, np.array(["a"] * 64))
    assert "dtype <U1" in _unchanged(model, lambda: steer(model, words, strength=1.0))
    assert "existing .npy" in _unchanged(model, lambda: steer(model, str(tmp_path / "missing.npy"), strength=1.0))


@pytest.mark.parametrize("kw,match", [
    ({"strength": 0.0}, "strength=0.0"), ({"gain": -math.inf}, "gain=-inf"),
    ({"strength": math.inf}, "strength=inf"), ({"gain": math.nan}, "gain=nan"),
    ({"strength": 1.0, "gain": 1.0}, "either strength= or gain="),
    ({"target_alignment": 1.5}, "target_alignment=1.5"), ({"layer": 2}, r"layer=\[2\].*\[-2, 1\]"),
    ({"layer": -3}, "layer="), ({"solve": "qr"}, "solve='qr'"), ({"measure": "both"}, "measure='both'"),
    ({"untie_last": True}, "untie_last=True.*ALBERT"),
])
def test_bad_options(model, kw, match) -> None:
    import re

    msg = _unchanged(model, lambda: steer(model, np.ones(64), **kw))
    assert re.search(match, msg), msg


def test_exactly_one_direction_source(model) -> None:
    assert "exactly one source" in _unchanged(model, lambda: steer(model, strength=1.0))
    assert "exactly one source" in _unchanged(model, lambda: steer(model, np.ones(64), eigvec=0, strength=1.0))
    assert "eigvec=99" in _unchanged(model, lambda: steer(model, eigvec=99, strength=1.0))
    # No tokenizer is known for a model built from a config.
    assert "tokenizer" in _unchanged(model, lambda: steer(model, token="a", strength=1.0))


def test_eigvec_direction_is_the_eigenvector(model) -> None:
    from steerformer import layer_matrices
    from steerformer.spectra import sorted_eig
    from steerformer.steering import unsteer

    F = layer_matrices(model, [1]).matrices[0]
    vals, vecs = sorted_eig(F)
    rec = steer(model, eigvec=0, strength=1.0, report=False)
    v = vecs[:, 0].real / vecs[:, 0].real.norm()
    u = torch.tensor(rec.direction, dtype=torch.float64)
    assert abs(abs(float(u @ v)) - 1) < 1e-12
    unsteer(model)
