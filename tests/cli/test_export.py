"""`steerformer export`: a steered checkpoint as a GGUF model or a PEFT LoRA adapter, each read back
independently (the gguf package's reader, safetensors) and compared with the steered weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import steerformer as sf

from ..conftest import random_vector, run_cli
from ..formats.gguf_sources import tiny_llama, write_llama_source

O_PROJ = "model.layers.1.self_attn.o_proj.weight"


@pytest.fixture(scope="module")
def steered(tmp_path_factory):
    """(folder, source GGUF, o_proj weight before steering) of a tiny Llama steered at layer 1."""
    tmp = tmp_path_factory.mktemp("export")
    model = tiny_llama()
    source = write_llama_source(tmp / "source.gguf", model)
    before = model.get_parameter(O_PROJ).detach().clone()
    sf.steer(model, random_vector(64, seed=1), strength=1.0, layer=1, report=False)
    return sf.save_steered(model, tmp / "steered"), source, before


def test_gguf_export_holds_the_steered_weights(steered, tmp_path) -> None:
    import gguf

    folder, source, before = steered
    res = run_cli(["export", folder, "--format", "gguf", "--source", source, "--out", tmp_path / "m.gguf"])
    assert res.exit_code == 0, res.output
    weights = load_file(str(folder / "model.safetensors"))  # the checkpoint as written, not the model in memory
    tensors = {t.name: t for t in gguf.GGUFReader(tmp_path / "m.gguf").tensors}
    # llama.cpp's names, written out here (attn_output and ffn_down are stored unpermuted)
    for name, key in (("blk.1.attn_output.weight", O_PROJ), ("blk.2.ffn_down.weight", "model.layers.2.mlp.down_proj.weight")):
        t = tensors[name]
        assert t.tensor_type == gguf.GGMLQuantizationType.F16
        np.testing.assert_array_equal(np.asarray(t.data), weights[key].to(torch.float16).numpy())
    # the steered o_proj, not the one the model started with
    assert not torch.equal(torch.from_numpy(np.array(tensors["blk.1.attn_output.weight"].data)),
                           before.to(torch.float16))


def test_peft_export_is_the_edit_as_a_lora(steered, tmp_path) -> None:
    folder, _, before = steered
    res = run_cli(["export", folder, "--format", "peft", "--out", tmp_path / "adapter"])
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["target_modules"] == ["model.layers.1.self_attn.o_proj"]
    lora = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    a = lora["base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight"].double()
    b = lora["base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight"].double()
    after = load_file(str(folder / "model.safetensors"))[O_PROJ].double()
    delta = config["lora_alpha"] / config["r"] * (b @ a)  # what PEFT adds to the base weight
    assert float((after - before.double()).abs().max()) > 1e-3  # the edit is there to be exported
    torch.testing.assert_close(before.double() + delta, after, atol=1e-6, rtol=0)


@pytest.mark.parametrize("extra, flag", [
    (["--format", "peft", "--dtype", "bf16"], "--dtype"),
    (["--format", "peft", "--source", "x.gguf"], "--source"),
    (["--format", "gguf", "--lora-rank", "2"], "--lora-rank"),
    (["--format", "gguf"], "--source"),  # a model steered in memory: no GGUF recorded to default to
    (["--format", "gguf", "--source", "missing.gguf"], "--source"),
])
def test_bad_flags_are_one_line_and_write_nothing(steered, tmp_path, extra, flag) -> None:
    folder, _, _ = steered
    out = tmp_path / ("out.gguf" if "gguf" in extra else "out")
    res = run_cli(["export", folder, "--out", out, *extra])
    assert res.exit_code == 2, res.output
    assert flag in res.output and res.output.count("\n") == 1, res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_unsteered_folder_is_refused(tmp_path) -> None:
    model = tiny_llama()
    model.save_pretrained(tmp_path / "plain")
    res = run_cli(["export", tmp_path / "plain", "--format", "peft", "--out", tmp_path / "adapter"])
    assert res.exit_code == 2 and "steered" in res.output, res.output
    assert not (tmp_path / "adapter").exists()


def test_help_has_an_example() -> None:
    res = run_cli(["export", "--help"])
    assert res.exit_code == 0 and "Example: steerformer export" in res.output


def test_gguf_source_defaults_to_the_gguf_the_model_was_loaded_from(steered, tmp_path, monkeypatch) -> None:
    """Without --source the recorded model id names the GGUF (``loading.gguf_file_of``: a .gguf path, the
    bundled SmolLM2); here that lookup is pointed at the source written above."""
    import gguf

    import steerformer.loading

    folder, source, _ = steered
    real, asked = steerformer.loading.gguf_file_of, []

    def gguf_file_of(model):
        asked.append(model)
        return source if model == "LlamaForCausalLM" else real(model)  # the id the steering record holds

    monkeypatch.setattr(steerformer.loading, "gguf_file_of", gguf_file_of)
    res = run_cli(["export", folder, "--format", "gguf", "--out", tmp_path / "m.gguf"])
    assert res.exit_code == 0, res.output
    assert "LlamaForCausalLM" in asked
    names = {t.name for t in gguf.GGUFReader(tmp_path / "m.gguf").tensors}
    assert "blk.1.attn_output.weight" in names


def test_progress_goes_to_stderr_and_quiet_silences_it(steered, tmp_path) -> None:
    from typer.testing import CliRunner

    from steerformer_cli.main import app

    folder, source, _ = steered
    args = ["export", str(folder), "--format", "gguf", "--source", str(source)]
    loud = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a.gguf")])
    quiet = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b.gguf"), "--quiet"])
    assert loud.exit_code == quiet.exit_code == 0
    assert f"loading {folder}" in loud.stderr and "writing" in loud.stderr
    assert "loading" not in quiet.stderr and "saved to" in quiet.stdout


def test_export_format_offers_exactly_the_registered_formats() -> None:
    import typer.main

    from steerformer.steering import format_names
    from steerformer_cli.main import app

    params = {p.name: p for p in typer.main.get_command(app).commands["export"].params}
    offered = [e.value for e in params["out_format"].type_descriptor.annotation]
    assert offered == format_names() == ["checkpoint", "peft", "gguf", "control-vector"]
