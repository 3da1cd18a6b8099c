"""The LoRA configs steerformer's PEFT export writes today, checked against what vLLM's LoRA loader
accepts (adapters/runtimes.py): a steered Llama passes, a steered GPT-2 is named as unservable,
and each rule vLLM applies names the offending entry."""

from __future__ import annotations

import json

import pytest
import torch

from steerformer.adapters.runtimes import VLLM_LORA
from steerformer.errors import InvalidArgumentError
from steerformer.formats.vllm_lora import check_vllm_lora, vllm_lora_problems
from steerformer.steering import save_steered, steer

from ..models import make_model
from .gguf_sources import tiny_llama

pytest.importorskip("peft")


def _u(d: int, seed: int) -> torch.Tensor:
    return torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _exported_config(model, tmp_path) -> dict:
    return json.loads((save_steered(model, tmp_path / "lora", format="peft") / "adapter_config.json").read_text())


def test_llama_export_is_served_by_vllm(tmp_path) -> None:
    model = tiny_llama()
    steer(model, _u(64, 0), gain=2.0, solve="exact", report=False)
    steer(model, _u(64, 1), gain=1.0, solve="exact", layer=0, report=False)
    steer(model, _u(64, 2), gain=1.0, solve="exact", layer=0, report=False)
    cfg = _exported_config(model, tmp_path)
    assert {m.rsplit(".", 1)[-1] for m in cfg["target_modules"]} == {"o_proj"}
    assert vllm_lora_problems(cfg, "llama") == []
    check_vllm_lora(cfg, "llama", max_lora_rank=8)


def test_gpt2_export_is_named_unservable(tmp_path) -> None:
    model = make_model("gpt2", dtype=torch.float32)
    steer(model, _u(64, 0), gain=2.0, solve="exact", report=False)
    cfg = _exported_config(model, tmp_path)
    with pytest.raises(InvalidArgumentError, match="GPT2LMHeadModel implements no SupportsLoRA") as err:
        check_vllm_lora(cfg, "gpt2")
    assert "\n" not in str(err.value)


BASE = {"peft_type": "LORA", "r": 1, "lora_alpha": 1, "bias": "none", "use_dora": False, "modules_to_save": None,
        "target_modules": ["model.layers.0.self_attn.o_proj", "model.layers.1.mlp.down_proj"], "rank_pattern": {}}


@pytest.mark.parametrize("change, words", [
    ({"target_modules": ["model.layers.0.self_attn.out_proj"]}, "out_proj"),
    ({"rank_pattern": {"model.layers.1.mlp.down_proj": 32}, "alpha_pattern": {"model.layers.1.mlp.down_proj": 32}},
     "LoRA rank 32 is greater than --max-lora-rank 16"),
    ({"rank_pattern": {"model.layers.1.mlp.down_proj": 2}}, "scales every module by lora_alpha/r = 1"),
    ({"r": 64}, "LoRA rank 64"),
    ({"bias": "lora_only"}, "bias='lora_only'"),
    ({"lora_bias": True}, "lora_bias=True"),
    ({"use_dora": True}, "DoRA"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save=['lm_head']"),
    ({"init_lora_weights": "pissa"}, "init_lora_weights='pissa'"),
])
def test_each_rule_names_what_vllm_would_refuse(change, words) -> None:
    cfg = {**BASE, **change}
    problems = vllm_lora_problems(cfg, "qwen2")
    assert len(problems) == 1 and words in problems[0]
    with pytest.raises(InvalidArgumentError, match="adapter_config="):
        check_vllm_lora(cfg, "qwen2")


def test_table_and_server_rank_are_checked() -> None:
    assert vllm_lora_problems(BASE, "mistral") == []
    assert "unchecked" in vllm_lora_problems(BASE, "falcon")[0]
    assert "falcon" not in VLLM_LORA
    assert vllm_lora_problems({**BASE, "r": 64}, "llama", max_lora_rank=64) == []
    with pytest.raises(InvalidArgumentError, match="max_lora_rank=12"):
        vllm_lora_problems(BASE, "llama", max_lora_rank=12)
