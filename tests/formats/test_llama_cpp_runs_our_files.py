"""End to end in llama.cpp itself (llama-cpp-python, not a dependency: skipped without it): the
f16 GGUF we write runs with the model's f16-rounded logits, and a control vector read from our
file, laid into llama.cpp's buffer as common.cpp lays direction.N (offset n_embd·(N − 1)), moves
the logits exactly as adding it to the output of transformers block N does — and not as block N ± 1."""

from __future__ import annotations

import copy
import ctypes

import numpy as np
import pytest
import torch

from steerformer.formats import ControlVector, read_control_vector, write_gguf_model

from .gguf_sources import tiny_llama, write_llama_source

llama_cpp = pytest.importorskip("llama_cpp")


def _hf_logits(model, ids, block=None, v=None) -> np.ndarray:
    def add(module, args, out):
        return (out[0] + v, *out[1:]) if isinstance(out, tuple) else out + v

    handle = None if block is None else model.model.layers[block].register_forward_hook(add)
    try:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].numpy()
    finally:
        if handle is not None:
            handle.remove()


def test_llama_cpp_runs_our_gguf_and_control_vector_at_the_stated_layer(tmp_path) -> None:
    model = tiny_llama()
    path = write_gguf_model(model, tmp_path / "m.gguf", source=write_llama_source(tmp_path / "s.gguf", model))
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for p in rounded.parameters():
            if p.ndim > 1:
                p.copy_(p.to(torch.float16).float())
    llm = llama_cpp.Llama(model_path=str(path), logits_all=True, n_ctx=64, n_threads=1, verbose=False)
    ids = [5, 17, 200, 33, 99, 4, 250]

    def cpp_logits() -> np.ndarray:
        llm.reset()
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)])

    assert np.abs(cpp_logits() - _hf_logits(rounded, ids)).max() < 1e-3
    n_layer, d = model.config.num_hidden_layers, model.config.hidden_size
    v = 2 * torch.randn(d, generator=torch.Generator().manual_seed(0))
    for n in (1, 2):
        cv = read_control_vector(ControlVector({n: v}, "llama").save(tmp_path / f"cv{n}.gguf"))
        buf = np.zeros((n_layer - 1) * d, dtype=np.float32)  # llama.cpp's buffer starts at layer 1
        for layer, vec in cv.directions.items():
            buf[(layer - 1) * d: layer * d] = vec.numpy()
        ptr = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        assert llama_cpp.llama_set_adapter_cvec(llm._ctx.ctx, ptr, buf.size, d, 1, n_layer) == 0
        steered = cpp_logits()
        llama_cpp.llama_set_adapter_cvec(llm._ctx.ctx, None, 0, d, -1, -1)
        errors = {b: np.abs(steered - _hf_logits(rounded, ids, b, v)).max() for b in range(n_layer)}
        assert errors[n] < 1e-3 and all(errors[b] > 10 * errors[n] for b in errors if b != n), errors
