"""A setup's summary prints its findings rounded (6.05, not 6.050000000000001: the 5.1.1
consensus time, 121 saved steps of 0.05); the JSON keeps every digit."""

from __future__ import annotations

import json

import numpy as np

from steerformer.ode import SetupResult
from steerformer.ode.result import SUMMARY_DIGITS


def test_summary_rounds_floats_and_json_keeps_them() -> None:
    t = 121 * 0.05
    assert repr(t) == "6.050000000000001"
    findings = {"consensus_time": [t], "sigma": 0.97 - 1e-16, "rho": 1 + 2.2e-16, "tiny": 8.938190641813763e-08,
                "conditions": {"a": 0.1 + 0.2, "ok": True}, "n_steps": 80, "missing": None, "name": "v1"}
    res = SetupResult("demo", "a demo", {}, np.arange(3.0), findings=findings)
    lines = res.summary().splitlines()
    assert lines == ["demo: a demo", "  consensus_time: [6.05]", "  sigma: 0.97", "  rho: 1", "  tiny: 8.93819e-08",
                     '  conditions: {"a": 0.3, "ok": true}', "  n_steps: 80", "  missing: null", '  name: "v1"']
    assert SUMMARY_DIGITS == 6
    assert json.loads(res.to_json())["summary"]["consensus_time"] == [t]
