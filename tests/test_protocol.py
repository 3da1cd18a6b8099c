"""Every public result type speaks one protocol (steerformer.results), and load(save(x)) gives x back."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from steerformer.results import PROTOCOL_METHODS, json_text, missing_methods, to_jsonable, version_of
from tests.models import make_model


def _result_types():
    from steerformer import AnalysisReport, CollapseResult, DecodeResult, SetupResult
    from steerformer.stats import AlignmentStats, PowerMethodReport

    from steerformer.steering import SteeringEvaluation, SteeringRecord
    from steerformer.sweep import SweepResult

    return [AnalysisReport, AlignmentStats, PowerMethodReport, CollapseResult, DecodeResult, SetupResult,
            SteeringEvaluation, SteeringRecord, SweepResult]


@pytest.mark.parametrize("cls", _result_types(), ids=lambda c: c.__name__)
def test_every_public_result_type_implements_the_protocol(cls) -> None:
    assert missing_methods(cls) == [], f"{cls.__name__} lacks {missing_methods(cls)} of {PROTOCOL_METHODS}"


def test_one_json_encoder() -> None:
    data = {"nan": float("nan"), "inf": -math.inf, "np": np.float32(0.5), "i": np.int64(3), "b": np.bool_(True),
            "z": 1 + 2j, "arr": np.array([[1.0, np.nan]]), "zarr": np.array([1j]), "t": torch.tensor([0.25]),
            "path": __import__("pathlib").Path("a/b"), "dtype": torch.float16, 3: (1, 2)}
    out = json.loads(json_text(data))  # strict JSON: no NaN token
    assert out == {"nan": None, "inf": None, "np": 0.5, "i": 3, "b": True, "z": [1.0, 2.0], "arr": [[1.0, None]],
                   "zarr": [[0.0, 1.0]], "t": [0.25], "path": "a/b", "dtype": "torch.float16", "3": [1, 2]}
    assert to_jsonable(np.float64(np.inf)) is None
    assert version_of({"steerformer_version": "1"}) == "1" and version_of({"steerformer": "0.1"}) == "0.1"


def _same(a, b) -> None:
    """The data of two results agree: their JSON and every array."""
    assert a.to_dict() == b.to_dict()
    assert a.to_json() == b.to_json()


def _arrays_equal(x: dict, y: dict) -> None:
    assert x.keys() == y.keys()
    for k in x:
        np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=k)


def test_analysis_report_round_trip(tmp_path) -> None:
    from steerformer import AnalysisReport, analyze

    model = make_model("gpt2-base")
    rep = analyze(model, n_prompts=3, n_tokens=4, full_model=False, cumulative=False)
    written = rep.save(tmp_path, plots=False)
    assert {"json", "csv", "npz"} <= written.keys() and all(p.is_file() for p in written.values())
    back = AnalysisReport.load(tmp_path)
    _same(rep, back)
    np.testing.assert_array_equal(back.eigenvalues, rep.spectra.eigenvalues.numpy())
    assert back.layer_ids == rep.layer_ids and back.slot_ids == rep.slot_ids
    _arrays_equal(back.power.controlled.per_token, rep.power.controlled.per_token)
    assert back.summary() == rep.summary() and rep.summary().splitlines()[1] == rep.table().splitlines()[0]
    assert json.loads(rep.to_json())["meta"]["steerformer_version"]
    figures = back.plot(tmp_path)  # a loaded report still draws its spectra and statistics
    assert {"eigenvalues_complex_plane.png", "power_method.png"} <= {p.name for p in figures}


def test_alignment_stats_and_power_report_round_trip(tmp_path) -> None:
    from steerformer.stats import AlignmentStats, PowerMethodReport, power_method_stats

    report = power_method_stats(make_model("bert"), n_prompts=3, n_tokens=4, full_model=False)
    st = report.controlled
    written = st.save(tmp_path / "st", plots=False)
    assert set(written) == {"json", "csv", "npz"}
    back = AlignmentStats.load(tmp_path / "st")
    _same(st, back)
    _arrays_equal(back.per_token, st.per_token)
    assert back.lengths == st.lengths and back.summary() == st.summary()
    report.save(tmp_path / "pm", plots=False)
    back_pm = PowerMethodReport.load(tmp_path / "pm")
    _same(report, back_pm)
    assert back_pm.verdict_lines() == report.verdict_lines()


def test_collapse_result_round_trip_and_nan_as_null(tmp_path) -> None:
    from steerformer import CollapseResult, collapse

    res = collapse(make_model("gpt2-base"), n_prompts=2, length=5, passes=2)
    res.meta["probe"] = float("nan")  # a NaN in the metadata is written as null, not as invalid `NaN`
    written = res.save(tmp_path)
    assert set(written) == {"json", "npz", "figure"}
    text = written["json"].read_text()
    assert "NaN" not in text and json.loads(text)["meta"]["probe"] is None
    back = CollapseResult.load(tmp_path)
    _arrays_equal({k: getattr(back, k) for k in ("e", "pairwise", "centroid", "e0", "token_ids")},
                  {k: getattr(res, k) for k in ("e", "pairwise", "centroid", "e0", "token_ids")})
    _same(res, back)
    assert back.summary() == res.summary()
    assert back.meta["steerformer_version"] == version_of(res.meta)
    # the summary's numbers are the mean of E over prompts, computed here independently
    assert f"{res.e[-1, -1].mean():.3e}" in res.summary().splitlines()[-1]


def test_decode_result_round_trip(tmp_path) -> None:
    from steerformer import DecodeResult, greedy_decode

    dec = greedy_decode(make_model("gpt2"), [1, 2, 3], passes=[1, 2], new_tokens=3)
    assert dec.save(tmp_path)["json"].name == "decode.json"
    back = DecodeResult.load(tmp_path)
    assert back == dec
    assert back.plot(tmp_path) == [] and back.summary() == "\n".join(dec.lines())


def test_setup_result_round_trip(tmp_path) -> None:
    from steerformer import SetupResult, run_setup

    r = run_setup("fig13a", t1=5)
    r.extra["note"] = float("nan")
    written = r.save(tmp_path, plots=False)
    assert set(written) == {"json", "npz"}
    back = SetupResult.load(tmp_path)
    _same(r, back)
    np.testing.assert_array_equal(back.times, r.times)
    _arrays_equal(back.series, r.series)
    _arrays_equal(back.trajectory, r.trajectory)
    assert back.findings == json.loads(json.dumps(to_jsonable(r.findings)))
    assert back.summary().splitlines()[0] == f"fig13a: {r.description}"


def test_steering_record_round_trip(tmp_path) -> None:
    from steerformer.steering import SteeringRecord, steer

    model = make_model("gpt2-base")
    d = model.config.n_embd
    rec = steer(model, torch.linspace(-1.0, 1.0, d, dtype=torch.float64), target_alignment=0.5, measure="dynamics",
                solve="exact", dynamics_n_prompts=3, dynamics_tokens=4)
    written = rec.save(tmp_path)
    assert written["json"].name == "record.json" and "steering_curve.png" in written  # the gain search was drawn
    back = SteeringRecord.load(tmp_path)
    _same(rec, back)
    assert back.summary() == rec.summary()
    assert torch.equal(back.edit.u, rec.edit.u) and torch.equal(back.edit.a, rec.edit.a)


def test_sweep_result_round_trip(tmp_path) -> None:
    from steerformer.sweep import SweepResult, checkpoints_from, sweep

    make_model("gpt2-base").save_pretrained(tmp_path / "ckpt")
    res = sweep(checkpoints_from(models=str(tmp_path / "ckpt")), tmp_path / "out", plots=True)
    back = SweepResult.load(tmp_path / "out")
    _same(res, back)
    assert back.summary() == res.summary() and back.to_csv() == res.to_csv()
    assert (tmp_path / "out" / "sweep.png").is_file()
