"""A CUDA device that runs on the CPU, for CPU-only CI: catches device mix-ups.

Inside ``with fake_cuda():`` torch reports one CUDA GPU. A tensor "on cuda:0" is a
:class:`FakeCudaTensor`: it holds a CPU tensor and reports ``device == cuda:0``; every operation
on it runs on that CPU tensor and comes back "on cuda:0". What a real GPU refuses, it refuses
with the same error:

- an operation mixing a cuda:0 tensor with a CPU tensor of one or more dimensions (CPU scalars,
  index tensors and cross-device ``copy_`` are allowed, as on CUDA): ``RuntimeError: Expected all
  tensors to be on the same device``;
- ``.numpy()`` / ``np.asarray`` of a cuda:0 tensor: ``TypeError: can't convert cuda:0 device type
  tensor to numpy``;
- a CPU ``torch.Generator`` for a CUDA draw.

So the public functions run end to end with ``device="cuda"`` and their real CUDA branches,
bit-for-bit as on the CPU (the arithmetic is the CPU's), and a path that forgets a ``.cpu()`` or
leaves one tensor behind fails here as on a GPU. It cannot catch what only real kernels do
(nondeterminism, TF32, memory limits): benchmarks/gpu_smoke.sh covers those on a card.

Mechanics: a ``TorchDispatchMode`` below autograd serves every aten op (so autograd works
unchanged); a ``TorchFunctionMode`` above it reroutes the few Python bindings that would touch a
real CUDA runtime first (``torch.tensor(..., device=)``, ``copy_``, indexing: they take a device
guard before dispatching).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

CUDA = torch.device("cuda", 0)

#: aten ops that accept CPU index tensors next to a CUDA tensor, and the cross-device copies.
#: (Indexing through the Python binding runs as "__getitem__"/"__setitem__", see _Functions.)
_INDEX_OPS = {"aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_", "__getitem__",
              "__setitem__"}
_COPY_OPS = {"aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor (``.elem``) that says it lives on cuda:0 (see the module docstring)."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> "FakeCudaTensor":
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(), dtype=elem.dtype,
            device=CUDA, requires_grad=False, layout=elem.layout)  # see _no_autograd
        r.elem = elem
        return r

    def __repr__(self, **kwargs) -> str:
        return f"FakeCudaTensor({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"a fake cuda:0 tensor was used outside fake_cuda() ({func})")

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
                        "host memory first.")

    def __array__(self, *args, **kwargs):
        return self.numpy()


def _is_cuda(device: Any) -> bool:
    return device is not None and not isinstance(device, (int, bool)) and torch.device(device).type == "cuda"


def _with_index(x: Any) -> Any:
    """'cuda' → cuda:0: a device without an index makes torch ask the (absent) runtime which is current."""
    if (isinstance(x, str) and x == "cuda") or (isinstance(x, torch.device) and x.type == "cuda" and x.index is None):
        return CUDA
    return x


def _run(func, op: str, args: tuple, kwargs: dict):
    """Run ``func`` on the CPU tensors behind ``args``, check devices as CUDA would, and put the
    outputs on cuda:0 when the inputs (or the ``device=`` asked for) were there."""
    seen: list[tuple[str, int]] = []

    def unwrap(x):
        if isinstance(x, FakeCudaTensor):
            seen.append(("cuda", x.dim()))
            return x.elem
        if isinstance(x, torch.Tensor):
            seen.append((x.device.type, x.dim()))
        return x

    target = kwargs.get("device")
    ua, uk = tree_map(unwrap, (args, {k: v for k, v in kwargs.items() if k != "device"}))
    if target is not None:
        uk["device"] = torch.device("cpu") if _is_cuda(target) else target
    gen = kwargs.get("generator")
    if gen is not None and _is_cuda(target) and gen.device.type != "cuda":
        raise RuntimeError("Expected a 'cuda' device type for generator but found 'cpu'")
    devices = {d for d, ndim in seen if not (d == "cpu" and ndim == 0)}  # CPU scalars mix freely
    if {"cuda", "cpu"} <= devices and op not in _COPY_OPS and op not in _INDEX_OPS:
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
                           f"and cpu! (fake_cuda: {op})")
    out = func(*ua, **uk)
    if op in _COPY_OPS:
        return args[0]
    if target is not None:
        on_cuda = _is_cuda(target)
    else:
        on_cuda = any(d == "cuda" for d, _ in seen)
    if op == "aten::_to_copy" and target is None:
        on_cuda = isinstance(args[0], FakeCudaTensor)
    same = {id(a.elem): a for a in tree_flatten((args, kwargs))[0] if isinstance(a, FakeCudaTensor)}

    def wrap(x):
        if isinstance(x, torch.Tensor) and not isinstance(x, FakeCudaTensor):
            if id(x) in same:  # an in-place op returns its input
                return same[id(x)]
            if on_cuda:
                return FakeCudaTensor(x)
        return x

    return tree_map(wrap, out)


class _Dispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _run(func, func._schema.name, args, dict(kwargs or {}))


_NEW_FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}
#: Answered by the CPU tensor behind a fake one: storage identity (transformers' tied-weight
#: check) and tolist.
_OF_THE_ELEMENT = {torch.Tensor.tolist, torch.Tensor.untyped_storage, torch.Tensor.data_ptr,
                   torch.Tensor._typed_storage}
_GUARD_ERROR = "not linked with support for cuda"


def _no_autograd(func) -> None:
    """Autograd cannot be faked: its graph nodes ask the CUDA runtime for the device's stream, and
    a CPU build aborts the process there (not an exception). So a cuda:0 tensor never requires
    grad (``requires_grad_`` leaves it False: a later ``backward`` fails with torch's own error), and
    moving a tensor that requires grad to cuda:0 with grad enabled raises here, so a test fails
    rather than killing pytest. Gradient code paths need a real GPU (gpu_smoke.sh)."""
    raise NotImplementedError(f"fake_cuda: {getattr(func, '__name__', func)} would record autograd on a cuda:0 "
                              "tensor, which the CPU-backed fake GPU cannot run (a real GPU can).")


def _grad_reaches_cuda(args: tuple, kwargs: dict) -> bool:
    """A tensor that requires grad meets a cuda:0 tensor or a move to cuda:0."""
    flat = tree_flatten((args, kwargs))[0]
    grad = any(isinstance(x, torch.Tensor) and x.requires_grad for x in flat)
    return grad and any(isinstance(x, FakeCudaTensor) or (isinstance(x, torch.device) and x.type == "cuda")
                        for x in flat)


#: Where a tensor that requires grad can reach the device (any other op mixing it with a cuda:0
#: tensor is a device error first).
_MOVES = {torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.copy_}


class _Functions(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.device:
            return func(*args, **kwargs)
        args, kwargs = tree_map(_with_index, (args, kwargs))
        if func in _NEW_FROM_DATA and _is_cuda(kwargs.get("device")):
            return func(*args, **{**kwargs, "device": "cpu"}).to(CUDA)
        if func is torch.Tensor.copy_:  # its binding takes a device guard before dispatching
            return torch.ops.aten.copy_.default(*args, **kwargs)
        if func is torch.Tensor.cuda:
            return args[0].to(CUDA)
        if func is torch.Tensor.requires_grad_ and isinstance(args[0], FakeCudaTensor):
            return args[0]  # stays False (nn.Parameter asks for True): see _no_autograd
        if func in _MOVES and torch.is_grad_enabled() and _grad_reaches_cuda(args, kwargs):
            _no_autograd(func)
        if func in _OF_THE_ELEMENT and isinstance(args[0], FakeCudaTensor):  # tolist copies to the host, as on CUDA
            return func(args[0].elem, *args[1:], **kwargs)
        try:
            return func(*args, **kwargs)
        except RuntimeError as exc:
            if _GUARD_ERROR not in str(exc):
                raise
        # A binding that guards the device itself (indexing, new_tensor, …): run it on the CPU tensors.
        return _run(func, getattr(func, "__name__", str(func)), args, kwargs)


@contextlib.contextmanager
def fake_cuda() -> Iterator[None]:
    """One fake CUDA GPU for the duration of the block (see the module docstring)."""
    patches = {
        "torch.cuda.is_available": lambda: True, "torch.cuda.device_count": lambda: 1,
        "torch.cuda.get_device_name": lambda *a: "fake cuda:0 (the CPU)", "torch.cuda.synchronize": lambda *a: None,
        "torch.cuda._lazy_init": lambda: None, "torch.cuda.current_device": lambda: 0,
        "torch.cuda.empty_cache": lambda: None,
        # torch.random.fork_rng(devices=[cuda]) saves and restores the CUDA generator; draws "on
        # cuda" come from the CPU generator here, which fork_rng restores anyway.
        "torch.cuda.get_rng_state": lambda *a: torch.zeros(16, dtype=torch.uint8),
        "torch.cuda.set_rng_state": lambda *a: None, "torch.cuda.manual_seed": lambda *a: None,
        "torch.cuda.manual_seed_all": lambda *a: None,
    }
    with contextlib.ExitStack() as stack:
        for target, fn in patches.items():
            stack.enter_context(mock.patch(target, fn))
        # Module.to keeps each Parameter object by swapping its contents (torch's path for tensor
        # subclasses); the default `param.data = moved` cannot hold a wrapper tensor.
        swap = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        stack.callback(torch.__future__.set_swap_module_params_on_conversion, swap)
        stack.enter_context(_Dispatch())
        stack.enter_context(_Functions())
        yield
