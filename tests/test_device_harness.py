"""The fake CUDA device of tests/fake_cuda.py refuses what a real GPU refuses, and allows what it
allows: the device tests below it are only as good as this."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.fake_cuda import FakeCudaTensor, fake_cuda


def test_tensors_report_cuda_and_compute_as_on_the_cpu() -> None:
    a = torch.arange(6.0).reshape(2, 3)
    with fake_cuda():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        b = a.to("cuda")
        assert isinstance(b, FakeCudaTensor) and b.device == torch.device("cuda", 0) and b.is_cuda
        c = (b @ b.T).sum(0)
        assert c.device.type == "cuda"
        back = c.cpu()
        assert type(back) is torch.Tensor and back.device.type == "cpu"
        assert float(b[1, 2]) == 5.0 and b.tolist() == a.tolist()
        z = torch.zeros(2, device="cuda")
        z.add_(1)  # in place: the same tensor, still on the device
        assert z.device.type == "cuda" and z.cpu().tolist() == [1.0, 1.0]
        t = torch.tensor([1.0, 2.0], device="cuda")
        assert t.device.type == "cuda"
    torch.testing.assert_close(back, (a @ a.T).sum(0))


def test_what_cuda_refuses_is_refused() -> None:
    with fake_cuda():
        x = torch.ones(3, 3, device="cuda")
        with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
            x.numpy()
        with pytest.raises(TypeError, match="can't convert cuda:0"):
            np.asarray(x)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            x @ torch.ones(3, 3)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            torch.cat([x, torch.ones(1, 3)])
        with pytest.raises(RuntimeError, match="generator"):
            torch.randn(3, device="cuda", generator=torch.Generator().manual_seed(0))


def test_what_cuda_allows_is_allowed() -> None:
    with fake_cuda():
        x = torch.arange(6.0, device="cuda").reshape(2, 3)
        y = x * torch.tensor(2.0)  # a CPU scalar mixes with a CUDA tensor
        idx = torch.tensor([2, 0])  # CPU index tensors index a CUDA tensor
        assert x[:, idx].cpu().tolist() == [[2.0, 0.0], [5.0, 3.0]]
        x[0] = torch.tensor([9.0, 9.0, 9.0])  # a cross-device copy into a view
        x.copy_(torch.ones(2, 3))
        assert y.device.type == "cuda" and x.cpu().sum() == 6


def test_modules_move_and_run_on_the_device() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2)
    want = lin(torch.ones(1, 4)).detach()
    with fake_cuda():
        lin.to("cuda")
        assert lin.weight.device.type == "cuda" and isinstance(lin.weight, torch.nn.Parameter)
        got = lin(torch.ones(1, 4, device="cuda"))
        with pytest.raises(RuntimeError, match="same device"):
            lin(torch.ones(1, 4))
        got = got.cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_autograd_on_the_fake_device_is_refused_not_a_crash() -> None:
    """A graph node on cuda:0 would abort the process on a CPU build: the harness raises instead."""
    with fake_cuda():
        x = torch.ones(3, device="cuda").requires_grad_(True)
        with pytest.raises(RuntimeError, match="does not require grad"):
            (2 * x).sum().backward()
        w = torch.ones(3, requires_grad=True)
        with pytest.raises(NotImplementedError, match="autograd"):
            w.to("cuda")
        with torch.no_grad():
            assert w.to("cuda").device.type == "cuda"
