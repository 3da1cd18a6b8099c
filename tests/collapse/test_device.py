"""`collapse` with device="cuda" on the CPU-backed fake GPU (tests/fake_cuda.py): the four variants
(pretrained with and without FFNs, one random draw, a draw per pass), a half-precision run and a
resumed run give the CPU run's numbers, and the caller's model stays where it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import steerformer as sf

from tests.device_checks import save_tiny_llama
from tests.fake_cuda import fake_cuda

SMALL = dict(passes=2, n_prompts=3, length=8)
ARRAYS = ("e", "pairwise", "centroid", "e0", "pairwise0", "centroid0", "token_ids")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("collapse") / "llama")


def _same(a, b) -> None:
    for name in ARRAYS:
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("variant", [dict(), dict(ffn=False), dict(weights="random"),
                                     dict(weights="random-per-pass"), dict(dtype="bf16")],
                         ids=["pretrained", "no-ffn", "random", "random-per-pass", "bf16"])
def test_collapse_variants_on_cuda_equal_the_cpu_run(variant, llama) -> None:
    want = sf.collapse(llama, device="cpu", **SMALL, **variant)
    with fake_cuda():
        got = sf.collapse(llama, device="cuda", **SMALL, **variant)
    _same(want, got)


def test_model_in_memory_is_copied_to_the_device_not_moved() -> None:
    from tests.models import make_model

    model = make_model("gpt2", dtype=torch.float32)
    want = sf.collapse(model, **SMALL)
    with fake_cuda():
        got = sf.collapse(model, device="cuda", **SMALL)
        assert next(model.parameters()).device.type == "cpu"
    _same(want, got)


def test_resumed_run_on_cuda_continues_the_cpu_numbers(tmp_path, llama) -> None:
    want = sf.collapse(llama, passes=3, n_prompts=3, length=8)
    with fake_cuda():
        sf.collapse(llama, device="cuda", out=tmp_path / "run", passes=1, n_prompts=3, length=8)
        got = sf.collapse(llama, device="cuda", out=tmp_path / "run", resume=True, passes=3, n_prompts=3, length=8)
    assert got.n_passes == 3
    _same(want, got)
