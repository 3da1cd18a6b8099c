"""Steering a model that lives on CUDA (the CPU-backed fake GPU of tests/fake_cuda.py): every mode
gives the CPU run's record and edited weights, undo restores the bytes, and a checkpoint saved
from the device equals the one saved from the CPU. Gradient paths (``through_ffn``) need a real
card (gpu_smoke.sh): the fake GPU cannot run autograd."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import steerformer as sf
from steerformer.steering import verify_checkpoint

from tests.device_checks import assert_same_numbers
from tests.fake_cuda import fake_cuda
from tests.models import make_model

U = np.random.default_rng(0).standard_normal(64)
MODES = {
    "exact gain": dict(solve="exact", gain=2.0),
    "strength": dict(solve="exact", strength=1.5),
    "alignment search": dict(target_alignment=0.5),
    "min-norm": dict(gain=2.0),
    "dynamics measure": dict(target_alignment=0.3, measure="dynamics", dynamics_n_prompts=4),
    "steer away": dict(solve="exact", gain=-1.0, compensate_bias=True),
    "ablate": dict(method="ablation", scale=0.5),
}


@pytest.fixture(scope="module")
def base():
    return make_model("gpt2", dtype=torch.float32)


def _record_numbers(rec) -> dict:
    doc = rec.to_dict()
    for key in ("created", "steerformer_version"):
        doc.pop(key, None)
    for e in doc.get("edits", []):
        e.pop("device", None)  # where the weight lived: the one entry that must differ
    return doc


def _on_both(base, run):
    cpu = copy.deepcopy(base)
    want = run(cpu)
    dev = copy.deepcopy(base)
    with fake_cuda():
        dev.to("cuda")
        got = run(dev)
        assert next(dev.parameters()).device.type == "cuda"
        dev.to("cpu")
    return (cpu, want), (dev, got)


@pytest.mark.parametrize("mode", list(MODES))
def test_steer_on_cuda_equals_the_cpu_run(mode, base) -> None:
    (cpu, want), (dev, got) = _on_both(base, lambda m: sf.steer(m, U, **MODES[mode]))
    assert [e.device for e in got.edits] == ["cuda:0"] * len(got.edits)
    assert_same_numbers(_record_numbers(want), _record_numbers(got), rtol=1e-6, atol=1e-9)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7, msg=name)


def test_unsteer_on_cuda_restores_the_bytes(base) -> None:
    model = copy.deepcopy(base)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with fake_cuda():
        model.to("cuda")
        sf.steer(model, U, solve="exact", gain=3.0)
        sf.steer(model, U, method="ablation")
        sf.unsteer(model)
        model.to("cpu")
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_checkpoint_saved_from_cuda_equals_the_cpu_one_and_verifies(base, tmp_path) -> None:
    from safetensors.torch import load_file

    def run(m):
        sf.steer(m, U, solve="exact", gain=2.0)
        where = tmp_path / m.device.type
        sf.save_steered(m, where)
        return where

    (_, want), (_, got) = _on_both(base, run)
    a, b = load_file(want / "model.safetensors"), load_file(got / "model.safetensors")
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    verify_checkpoint(got)
    with fake_cuda():
        back = sf.load_for_steering(got, device="cuda")
        assert next(back.parameters()).device.type == "cuda"
        sf.unsteer(back)
        back.to("cpu")
    for k, v in base.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


def test_peft_export_from_cuda(base, tmp_path) -> None:
    from safetensors.torch import load_file

    def run(m):
        sf.steer(m, U, solve="exact", gain=2.0)
        return sf.save_steered(m, tmp_path / f"peft-{m.device.type}", format="peft")

    (_, want), (_, got) = _on_both(base, run)
    a, b = load_file(want / "adapter_model.safetensors"), load_file(got / "adapter_model.safetensors")
    assert sorted(a) == sorted(b) and all(torch.allclose(a[k], b[k], atol=1e-7) for k in a)


def test_contrastive_direction_of_a_model_on_cuda() -> None:
    pos, neg = ["the sea is blue", "waves crash on rocks"], ["the city is loud", "cars honk in traffic"]
    model = sf.load_model(sf.BUNDLED_MINILM)
    want = sf.contrastive_direction(model, pos, neg, layer=2)
    with fake_cuda():
        model.to("cuda")
        got = sf.contrastive_direction(model, pos, neg, layer=2)
        model.to("cpu")
    torch.testing.assert_close(got.vector, want.vector, rtol=1e-6, atol=1e-7)
