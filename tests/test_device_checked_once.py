"""``analyze`` checks its device once per run (issue 26: it was once per layer and solver, through an
import from the math core up into the source layer), and a bad device is still refused up front."""

from __future__ import annotations

import sys

import pytest

import steerformer as sf
from steerformer.configs import check_device
from steerformer.errors import InvalidArgumentError

from .models import make_model


def _device_checks(run) -> int:
    """How often :func:`check_device` runs during ``run()`` (counted by its code object, so an import
    under another name is counted too)."""
    code, n = check_device.__code__, [0]

    def count(frame, event, arg):
        if event == "call" and frame.f_code is code:
            n[0] += 1

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return n[0]


@pytest.mark.parametrize("device", [None, "cpu"])
def test_analyze_checks_the_device_once_for_every_layer(device) -> None:
    model = make_model("gpt2", n_layer=3)
    reports = []
    assert _device_checks(lambda: reports.append(sf.analyze(model, device=device, stats=False))) == 1
    assert len(reports[0].layers) == 3  # three layers, three solves, one check


def test_a_bad_device_is_refused_before_anything_runs() -> None:
    model = make_model("gpt2")
    with pytest.raises(InvalidArgumentError, match="device='meta'"):
        sf.analyze(model, device="meta")
