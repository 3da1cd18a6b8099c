"""`sweep --device cuda` on the CPU-backed fake GPU (tests/fake_cuda.py): spectra and statistics
tasks give the CPU numbers, and tasks finished on one device are reused on another."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2LMHeadModel

from steerformer.sweep import checkpoints_from, sweep

from tests.device_checks import assert_same_numbers, save_tiny_llama
from tests.fake_cuda import fake_cuda
from tests.models import gpt2_config


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    torch.manual_seed(0)
    GPT2LMHeadModel(gpt2_config(n_layer=2, n_embd=32, n_head=4)).save_pretrained(root / "gpt2")
    save_tiny_llama(root / "llama")
    return checkpoints_from(models=f"{root / 'gpt2'},{root / 'llama'}")


def test_sweep_on_cuda_equals_the_cpu_sweep_and_reuses_it(checkpoints, tmp_path) -> None:
    stats = {"n_prompts": 2, "n_tokens": 4, "null_draws": 0, "full_model": False}
    want = sweep(checkpoints, tmp_path / "cpu", stats=stats, plots=False)
    with fake_cuda():
        got = sweep(checkpoints, tmp_path / "cuda", stats=stats, plots=False, device="cuda")
        again = sweep(checkpoints, tmp_path / "cpu", stats=stats, plots=False, device="cuda")
    assert got.tasks_run == want.tasks_run and again.tasks_run == 0 and again.tasks_reused == want.tasks_run
    assert_same_numbers(want.rows, got.rows, rtol=1e-10, atol=1e-12)


def test_sweep_device_is_checked_before_any_work(checkpoints, tmp_path) -> None:
    from steerformer.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="--device"):
        sweep(checkpoints, tmp_path / "x", plots=False, device="cuda:7" if torch.cuda.is_available() else "cuda")
    assert not (tmp_path / "x").exists()
