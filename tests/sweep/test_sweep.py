"""`steerformer sweep`: three tiny checkpoints, numbers against an independent eig of each layer's
F = (c_attn[:, 2d:3d] @ c_proj).T (docs/math.md §1 table), resume after an interruption, and the same
numbers on a local Ray instance."""

from __future__ import annotations

import csv
import importlib.util
import json

import numpy as np
import pytest
import torch
from transformers import GPT2LMHeadModel

from tests.models import gpt2_config

N_LAYERS = 3


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    paths, eig1 = [], []
    for seed in range(3):
        torch.manual_seed(seed)
        m = GPT2LMHeadModel(gpt2_config(n_layer=N_LAYERS, n_embd=32, n_head=4))
        p = root / f"step{seed}"
        m.save_pretrained(p)
        d = m.config.n_embd
        lam = []
        for blk in m.transformer.h:
            W = blk.attn.c_attn.weight.detach().double()
            F = (W[:, 2 * d:3 * d] @ blk.attn.c_proj.weight.detach().double()).T.numpy()
            ev = np.linalg.eigvals(F)
            lam.append(ev[np.argmax(ev.real)])
        paths.append(str(p))
        eig1.append(lam)
    return paths, eig1


def _rows(out):
    with open(out / "sweep.csv") as f:
        return list(csv.DictReader(f))


def test_sweep_local_numbers_and_resume(checkpoints, tmp_path, monkeypatch) -> None:
    import steerformer.sweep.run as run
    from steerformer.sweep import checkpoints_from, sweep

    paths, eig1 = checkpoints
    cks = checkpoints_from(models=",".join(paths))
    res = sweep(cks, tmp_path / "a", plots=False)
    assert res.tasks_run == 3 * N_LAYERS and res.tasks_reused == 0
    rows = _rows(tmp_path / "a")
    assert len(rows) == 3 * N_LAYERS
    for i, c in enumerate(cks):
        for k in range(N_LAYERS):
            r = next(r for r in rows if r["checkpoint"] == c.key and int(r["layer"]) == k)
            assert float(r["lambda1_re"]) == pytest.approx(eig1[i][k].real, rel=1e-9, abs=1e-12)
        assert json.loads((tmp_path / "a" / c.key / "report.json").read_text())["meta"]["path"]

    # Interrupt after 4 tasks, then resume: only the 5 missing ones run, the numbers are the same.
    calls = []
    real = run._run_task

    def flaky(task):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(task)
        return real(task)

    monkeypatch.setattr(run, "_run_task", flaky)
    with pytest.raises(KeyboardInterrupt):
        sweep(cks, tmp_path / "b", plots=False)
    monkeypatch.setattr(run, "_run_task", real)
    again = sweep(cks, tmp_path / "b", plots=True)
    assert (again.tasks_run, again.tasks_reused) == (3 * N_LAYERS - 4, 4)
    assert _rows(tmp_path / "b") == rows
    assert (tmp_path / "b" / "sweep.png").is_file()
    # A finished sweep rerun does nothing.
    assert sweep(cks, tmp_path / "b", plots=False).tasks_run == 0


def test_sweep_cli_and_bad_input(checkpoints, tmp_path) -> None:
    from typer.testing import CliRunner

    from steerformer_cli.main import app

    paths, _ = checkpoints
    res = CliRunner().invoke(app, ["sweep", "--models", ",".join(paths[:2]), "--out", str(tmp_path), "--layers", "0",
                                   "--no-plots"])
    assert res.exit_code == 0, res.output
    assert "2 tasks run" in res.output and len(_rows(tmp_path)) == 2
    bad = CliRunner().invoke(app, ["sweep", "--models", paths[0], "--out", str(tmp_path), "--executor", "dask"])
    assert bad.exit_code == 2 and "--executor" in bad.output


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (optional extra: steerformer[ray])")
def test_sweep_on_local_ray_gives_identical_numbers(checkpoints, tmp_path) -> None:
    from steerformer.sweep import checkpoints_from, sweep

    paths, _ = checkpoints
    cks = checkpoints_from(models=",".join(paths))
    # One layer per checkpoint keeps this under ~40 s on an idle 2-core machine: Ray's start-up
    # (~20 s) and each worker's first import of torch dominate, not the tasks.
    local = sweep(cks, tmp_path / "local", layers=[0], plots=False)
    on_ray = sweep(cks, tmp_path / "ray", layers=[0], executor="ray", workers=2, plots=False)
    assert on_ray.tasks_run == 3
    assert _rows(tmp_path / "ray") == _rows(tmp_path / "local")
    assert local.reports.keys() == on_ray.reports.keys()


def test_sweep_statistics_columns_match_power_method_stats(checkpoints, tmp_path) -> None:
    from steerformer.stats import power_method_stats
    from steerformer.sweep import checkpoints_from, sweep

    paths, _ = checkpoints
    opts = {"n_prompts": 3, "n_tokens": 4, "full_model": False, "cumulative": False}
    res = sweep(checkpoints_from(models=paths[0]), tmp_path, stats=opts, plots=False)
    ref = power_method_stats(paths[0], **opts).controlled.layers
    rows = _rows(tmp_path)
    assert [float(r["P"]) for r in rows] == [r["P"] for r in ref]
    assert [float(r["delta_rho_mean"]) for r in rows] == pytest.approx([r["delta_rho_mean"] for r in ref], abs=1e-12)
    assert res.tasks_run == N_LAYERS + 1


def test_sweep_reruns_a_task_whose_checkpoint_changed(tmp_path) -> None:
    # Found after the merge: a finished task was reused for other weights saved into the same folder.
    from steerformer.sweep import checkpoints_from, sweep

    p = tmp_path / "ckpt"
    torch.manual_seed(0)
    GPT2LMHeadModel(gpt2_config(n_layer=1, n_embd=32, n_head=4)).save_pretrained(p)
    first = sweep(checkpoints_from(models=str(p)), tmp_path / "out", plots=False)
    torch.manual_seed(1)
    m = GPT2LMHeadModel(gpt2_config(n_layer=1, n_embd=32, n_head=4))
    m.save_pretrained(p)
    again = sweep(checkpoints_from(models=str(p)), tmp_path / "out", plots=False)
    assert first.tasks_run == 1 and again.tasks_run == 1 and again.tasks_reused == 0
    d = m.config.n_embd
    blk = m.transformer.h[0].attn
    F = (blk.c_attn.weight.detach().double()[:, 2 * d:3 * d] @ blk.c_proj.weight.detach().double()).T.numpy()
    ev = np.linalg.eigvals(F)
    assert float(_rows(tmp_path / "out")[0]["lambda1_re"]) == pytest.approx(ev[np.argmax(ev.real)].real, rel=1e-9)


@pytest.mark.parametrize("where", ["sweep-out-is-cwd", "sweep-out-is-input", "sweep-out-foreign-folder"])
def test_sweep_output_folder_rules(checkpoints, tmp_path, monkeypatch, where) -> None:
    from steerformer.errors import InvalidArgumentError
    from steerformer.sweep import checkpoints_from, sweep

    paths, _ = checkpoints
    cks = checkpoints_from(models=paths[0])
    if where == "sweep-out-is-cwd":
        monkeypatch.chdir(tmp_path)
        out = "."
    elif where == "sweep-out-is-input":
        out = paths[0]
    else:
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "thesis.tex").write_text("x")
        out = tmp_path / "mine"
    before = sorted(p.name for p in (tmp_path.iterdir() if where != "sweep-out-is-input" else
                                     __import__("pathlib").Path(paths[0]).iterdir()))
    with pytest.raises(InvalidArgumentError, match="--out"):
        sweep(cks, out, plots=False)
    after = sorted(p.name for p in (tmp_path.iterdir() if where != "sweep-out-is-input" else
                                    __import__("pathlib").Path(paths[0]).iterdir()))
    assert after == before
