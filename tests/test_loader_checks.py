"""The loader's cheap checks: finiteness on every dtype the reader returns, and the one device check."""

from __future__ import annotations


import pytest
import torch

from steerformer.errors import CheckpointError
from steerformer.consistency import check_finite


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def testcheck_finite_matches_isfinite(dtype):
    g = torch.Generator().manual_seed(0)
    for n in (1, 7, 64, 129, 5000):
        check_finite(torch.randn(n, generator=g).to(dtype), "w", "here")  # finite: passes
        for bad in (float("nan"), float("inf"), -float("inf")):
            t = torch.randn(n, generator=g).to(dtype)
            pos = int(torch.randint(n, (1,), generator=g))
            t[pos] = bad
            assert not bool(torch.isfinite(t).all())  # the reference answer
            with pytest.raises(CheckpointError, match="1 non-finite"):
                check_finite(t.reshape(1, -1), "w", "here")
    check_finite(torch.empty(0, dtype=dtype), "w", "here")  # empty: nothing to check
    check_finite(torch.tensor([2**62], dtype=torch.int64), "w", "here")  # integers are not checked


def test_one_device_check():
    """eig.resolve_device is loading.check_device limited to cpu/cuda: same device, same refusals."""
    from steerformer.errors import InvalidArgumentError
    from steerformer.eig import resolve_device
    from steerformer.loading import check_device

    assert resolve_device(None) == check_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for bad in ("quantum", "cuda:99"):
        with pytest.raises(InvalidArgumentError, match=f"device='{bad}' is invalid"):
            resolve_device(bad)
        with pytest.raises(InvalidArgumentError, match=f"--device='{bad}' is invalid"):
            check_device(bad, name="--device")
    with pytest.raises(InvalidArgumentError, match="device='meta' is invalid: expected 'cpu' or 'cuda'"):
        resolve_device("meta")  # a real torch device, but no eigen-solver runs there
