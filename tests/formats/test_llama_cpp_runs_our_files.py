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


def f16_rounded(model):
    """A copy of ``model`` with every weight matrix rounded to float16 (what an f16 GGUF holds)."""
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for p in rounded.parameters():
            if p.ndim > 1:
                p.copy_(p.to(torch.float16).float())
    return rounded


def test_llama_cpp_runs_our_gguf_and_control_vector_at_the_stated_layer(tmp_path) -> None:
    model = tiny_llama()
    path = write_gguf_model(model, tmp_path / "m.gguf", source=write_llama_source(tmp_path / "s.gguf", model))
    rounded = f16_rounded(model)
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


def test_strength_one_of_an_exported_steer_is_the_calibrated_steer_in_llama_cpp(tmp_path) -> None:
    """The KL-calibrated steer exported as a control vector (Direction.from_record): llama.cpp at
    strength 1.0 gives the logits of transformers with the steer's vector γ·u added after block N —
    the addition the weight edit makes (tests/formats/test_calibrated_control_vector.py checks that
    part with hooks) — within the f16 tolerance of the first test."""
    from steerformer.steering import Direction, steer

    model = tiny_llama()
    path = write_gguf_model(model, tmp_path / "m.gguf", source=write_llama_source(tmp_path / "s.gguf", model))
    rounded = f16_rounded(model)
    edited = copy.deepcopy(model)
    u = np.random.default_rng(0).normal(size=model.config.hidden_size)
    rec = steer(edited, u, layer=1, progress=False)  # causal LM: the KL-calibrated addition
    assert rec.edits[0].kind == "add"
    cv = read_control_vector(Direction.from_record(rec).to_control_vector().save(tmp_path / "steer.gguf"))
    assert cv.layers == [1] and "strength 1.0 adds what the steer added" in cv.notes["scale"]
    v = cv.directions[1]
    n_layer, d = model.config.num_hidden_layers, model.config.hidden_size
    llm = llama_cpp.Llama(model_path=str(path), logits_all=True, n_ctx=64, n_threads=1, verbose=False)
    ids = [5, 17, 200, 33, 99, 4, 250]
    buf = np.zeros((n_layer - 1) * d, dtype=np.float32)
    strength = 1.0
    buf[0:d] = strength * v.numpy()  # direction.1 at offset n_embd·(1 − 1), as common.cpp lays it
    ptr = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    assert llama_cpp.llama_set_adapter_cvec(llm._ctx.ctx, ptr, buf.size, d, 1, n_layer) == 0
    llm.reset()
    llm.eval(ids)
    steered = np.array(llm.scores[: len(ids)])
    expected = _hf_logits(rounded, ids, 1, v)
    base = _hf_logits(rounded, ids)
    assert np.abs(steered - expected).max() < 1e-3
    assert np.abs(expected - base).max() > 10 * np.abs(steered - expected).max()  # the steer shows
