"""The vLLM route (docs/ecosystem.md): the adapters steerformer exports for a tiny Llama — a
steering edit, the rank-k ablation of every writer including the token embedding, and the
truncated norm-preserving ablation — pass vLLM's loader rules (adapter config and module paths),
and PEFT applies each as the steered model computes (exactly for the low-rank ones; the
truncation error reported equals an SVD written here)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.formats import check_vllm_adapter, vllm_adapter_problems
from steerformer.steering import ablate, save_steered, steer
from steerformer.steering.lora import choose_lora_rank

from ..models import make_model
from .gguf_sources import tiny_llama

peft = pytest.importorskip("peft")


def _dirs(k: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(k, 64, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.double()


IDS = torch.randint(3, 200, (2, 11), generator=torch.Generator().manual_seed(3))


def test_ablation_of_every_writer_is_an_exact_rank_k_adapter_vllm_serves(tmp_path) -> None:
    model = tiny_llama(tie=False).double()
    base = copy.deepcopy(model)
    steer(model, _dirs(1, 5)[0], gain=1.5, solve="exact", layer=1, report=False)
    ablate(model, _dirs(2), writers="attention,mlp,embedding", report=False)
    out = save_steered(model, tmp_path / "lora", format="peft")
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert {m.rsplit(".", 1)[-1] for m in cfg["target_modules"]} == {"embed_tokens", "o_proj", "down_proj"}
    assert cfg["r"] == 2 and cfg["rank_pattern"] == {"model.layers.1.self_attn.o_proj": 3}  # steer + ablate
    assert vllm_adapter_problems(out, "llama", max_lora_rank=8) == []
    check_vllm_adapter(out, "llama", max_lora_rank=8)
    pm = peft.PeftModel.from_pretrained(base, str(out)).eval()
    want, got = _logits(model, IDS), _logits(pm, IDS)
    assert float((got - want).abs().max()) <= 1e-9 * float(want.abs().max())


def test_norm_preserving_ablation_is_truncated_with_its_error_reported(tmp_path) -> None:
    model = tiny_llama(tie=False).double()
    base = copy.deepcopy(model)
    ablate(model, _dirs(1), writers="attention,mlp", norm_preserving="rows", report=False)
    with pytest.raises(InvalidArgumentError, match="lora_rank=None") as err:
        save_steered(model, tmp_path / "no-rank", format="peft")
    assert "\n" not in str(err.value)
    out = save_steered(model, tmp_path / "lora", format="peft", lora_rank=3)
    lora = json.loads((out / "steerformer" / "record.json").read_text())["lora"]
    name = "model.layers.0.mlp.down_proj"
    delta = (model.get_parameter(f"{name}.weight") - base.get_parameter(f"{name}.weight")).detach()
    S = torch.linalg.svdvals(delta)
    assert lora[name]["rank"] == 3 and not lora[name]["exact"]
    assert abs(lora[name]["relative_error"] - float(S[3:].norm() / S.norm())) <= 1e-12
    check_vllm_adapter(out, "llama", max_lora_rank=8)
    merged = peft.PeftModel.from_pretrained(copy.deepcopy(base), str(out)).merge_and_unload()
    err = float((merged.get_parameter(f"{name}.weight") - model.get_parameter(f"{name}.weight")).detach().norm()
                / delta.norm())
    assert abs(err - lora[name]["relative_error"]) <= 1e-9


def test_rank_under_a_cost_budget_and_the_steered_weights_come_back() -> None:
    model = tiny_llama(tie=False).double()
    base_logits = _logits(model, IDS)
    ablate(model, _dirs(1), writers="attention,mlp", norm_preserving="columns", report=False)
    steered = {k: v.clone() for k, v in model.state_dict().items()}
    full = _logits(model, IDS)

    def cost(m) -> float:  # distance of the adapter's logits from the merged edit's (a stand-in for a KL)
        return float((_logits(m, IDS) - full).abs().max() / (full - base_logits).abs().max())

    choice = choose_lora_rank(model, cost, max_cost=0.05, ranks=(1, 2, 4, 8, 32))
    assert choice.rank is not None and [r for r, _, _ in choice.tried][-1] == choice.rank
    assert all(c > 0.05 for _, c, _ in choice.tried[:-1]) and choice.tried[-1][1] <= 0.05
    errors = [e for _, _, e in choice.tried]
    assert errors == sorted(errors, reverse=True)  # more rank, less truncation error
    assert all(torch.equal(steered[k], v) for k, v in model.state_dict().items())


def test_adapters_vllm_would_not_apply_are_named(tmp_path) -> None:
    bare = make_model("llama", dtype=torch.float32)  # LlamaModel: module paths without "model."
    steer(bare, _dirs(1)[0][:32], gain=1.0, solve="exact", report=False)
    out = save_steered(bare, tmp_path / "bare", format="peft")
    with pytest.raises(InvalidArgumentError, match="saved from the bare base model") as err:
        check_vllm_adapter(out, "llama")
    assert "\n" not in str(err.value)
    biased = tiny_llama(tie=False)
    ablate(biased, _dirs(1)[0], writers="attention,mlp", bias=True, report=False)  # Llama has no biases: no change
    save_steered(biased, tmp_path / "nobias", format="peft")
    gpt2 = make_model("gpt2", dtype=torch.float32)
    ablate(gpt2, _dirs(1)[0], writers="attention,mlp", bias=True, report=False)
    with pytest.raises(InvalidArgumentError, match="cannot change a bias"):
        save_steered(gpt2, tmp_path / "gpt2", format="peft")
    assert not (tmp_path / "gpt2").exists()
