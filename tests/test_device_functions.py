"""The math core's public functions with device="cuda" or inputs on CUDA (the CPU-backed fake GPU
of tests/fake_cuda.py): each keeps its inputs' device (or returns on the device asked for) and
gives the CPU's numbers. Per family, so rotary, ALiBi, masks and shared slots are all covered."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import steerformer as sf
from steerformer.eig import dense_eig, factored_eig

from tests.device_checks import save_tiny_llama
from tests.fake_cuda import fake_cuda
from tests.models import make_model

FAMILIES = ["gpt2", "gpt_neo", "bert", "albert"]


def _tensors(w: sf.AttentionWeights) -> dict[str, torch.Tensor]:
    return {f.name: getattr(w, f.name) for f in dataclasses.fields(w) if isinstance(getattr(w, f.name), torch.Tensor)}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("functions") / "llama")


@pytest.mark.parametrize("name", FAMILIES + ["llama"])
def test_weights_attention_and_dynamics_on_cuda(name, llama) -> None:
    model = llama if name == "llama" else make_model(name, dtype=torch.float64)
    source = sf.open_source(model)
    w_cpu = sf.read_attention_weights(source, [0])[0]
    x = sf.random_tokens(2, 5, source.adapter.d_model, seed=0)
    want = (sf.attention_probs(x, w_cpu), sf.attention_output(x, w_cpu), sf.dynamics_step(x, w_cpu),
            sf.run_dynamics(model, n_prompts=2, n_tokens=5).states, sf.layer_matrices(model).matrices)
    with fake_cuda():
        w = sf.read_attention_weights(sf.open_source(model), [0], device="cuda")[0]
        assert {t.device.type for t in _tensors(w).values()} == {"cuda"}
        xd = x.to("cuda")
        got = (sf.attention_probs(xd, w), sf.attention_output(xd, w), sf.dynamics_step(xd, w),
               sf.run_dynamics(model, n_prompts=2, n_tokens=5, device="cuda").states,
               sf.layer_matrices(model, device="cuda").matrices)
        assert [t.device.type for t in got] == ["cuda"] * len(got)
        got = [t.cpu() for t in got]
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_eigensolvers_return_on_the_device_they_ran_on() -> None:
    g = torch.Generator().manual_seed(0)
    F = torch.randn(12, 12, generator=g, dtype=torch.float64)
    A, B = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.randn(3, 12, generator=g, dtype=torch.float64)
    want_d, want_f = dense_eig(F), factored_eig(A, B)
    with fake_cuda():
        got_d = dense_eig(F.to("cuda"), device="cuda")
        got_f = factored_eig(A.to("cuda"), B.to("cuda"), device="cuda")
        assert {t.device.type for t in (*got_d, *got_f)} == {"cuda"}
        got_d, got_f = [t.cpu() for t in got_d], [t.cpu() for t in got_f]
    # the same eigenvalues as a set (each solver orders its own way)
    for got, want in ((got_d, want_d), (got_f, want_f)):
        key = lambda v: torch.sort(v.real * 1e6 + v.imag).values  # noqa: E731
        torch.testing.assert_close(key(got[0]), key(want[0]), rtol=1e-9, atol=1e-9)


def test_greedy_decode_of_a_model_on_cuda() -> None:
    model = make_model("gpt2", dtype=torch.float32)
    want = sf.greedy_decode(model, [1, 2, 3], passes=[1, 2], new_tokens=4)
    with fake_cuda():
        model.to("cuda")
        got = sf.greedy_decode(model, [1, 2, 3], passes=[1, 2], new_tokens=4)
        model.to("cpu")
    assert got.to_dict() == want.to_dict()


def test_model_hidden_states_of_a_checkpoint_run_on_cuda(llama) -> None:
    ids = [[1, 5, 7, 9], [2, 4]]
    want = sf.model_hidden_states(llama, input_ids=ids)
    with fake_cuda():
        got = sf.model_hidden_states(llama, input_ids=ids, device="cuda")
    torch.testing.assert_close(got.states, want.states, rtol=1e-12, atol=1e-12)
