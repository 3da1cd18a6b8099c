"""Named setups serialize and draw; the CLI is a thin shell around them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from steerformer.errors import InvalidArgumentError
from steerformer.ode import SETUPS, layer_matrix_dynamics, random_layer_matrix, run_setup
from steerformer_cli.main import app


def test_setups_default_to_the_papers_sizes():
    import inspect

    sig = inspect.signature(SETUPS["5.1.2"].run)
    assert (sig.parameters["runs"].default, sig.parameters["n"].default, sig.parameters["d"].default,
            sig.parameters["heads"].default) == (100, 50, 500, 2)
    assert SETUPS["fig13a"].run.__kwdefaults__["heads"] == 5


def test_result_writes_json_npz_and_figures(tmp_path):
    r = run_setup("5.1.1", t1=2.0, save_points=21)
    written = r.save(tmp_path, plots=False)
    data = json.loads(written["json"].read_text())
    assert json.loads(r.to_json()) == data
    assert data["setup"] == "5.1.1" and len(data["series"]["V"]) == 21
    assert np.load(tmp_path / "result.npz")["tokens"].shape == (21, 1, 10, 3)
    pngs = r.plot(tmp_path)
    assert {p.name for p in pngs} == {"tokens_sphere.png", "P_norms.png", "lyapunov_V.png"}
    assert all(p.stat().st_size > 1000 for p in pngs)


def test_fig13a_both_models_reach_v1():
    r = run_setup("fig13a")
    assert r.findings["single_head_final_min_rho"] > 1 - 1e-8
    assert r.findings["multi_head_final_min_rho"] > 1 - 1e-8


def test_bridge_with_a_given_layer_matrix_aligns_with_its_top_eigenvector():
    F = random_layer_matrix(16, spike=4.0, seed=1)
    r = layer_matrix_dynamics(F, runs=5, steps=40)
    lam = np.linalg.eigvals(F.numpy())
    assert r.findings["lambda1"][0] == pytest.approx(lam.real.max())
    assert r.findings["rho_v1_final_mean"] > 0.999 > r.findings["rho_v1_initial_mean"]
    with pytest.raises(InvalidArgumentError, match="P="):
        layer_matrix_dynamics(F, P=np.zeros((2, 16, 16)), heads=1)


def test_unknown_setup_is_refused():
    with pytest.raises(InvalidArgumentError, match="setup"):
        run_setup("5.1.9")


def test_cli_list_and_run(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["simulate", "list"])
    assert res.exit_code == 0 and all(name in res.output for name in SETUPS)
    res = runner.invoke(app, ["simulate", "fig13b", "--t1", "1500", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "small_returns: true" in res.output and (tmp_path / "fig13b.png").exists()
    assert json.loads((tmp_path / "result.json").read_text())["summary"]["large_escapes_to_consensus"]


@pytest.mark.parametrize("args,needle", [(["simulate", "nope"], "SETUP="), (["simulate", "5.1.1", "--t1", "-1"], "t1="),
                                         (["simulate", "5.1.1", "--dt", "0"], "dt="),
                                         (["simulate", "fig13a", "--model", "x"], "--model")])
def test_cli_bad_input_exits_2_with_one_line(args, needle):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output
