"""The torch paths of the ODE module with tensors on CUDA (the CPU-backed fake GPU of
tests/fake_cuda.py): each public function runs on inputs that live on the device, returns its
tensors there (NumPy results come to the host) and gives the CPU's numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import steerformer.ode as ode

from tests.fake_cuda import fake_cuda

n, d = 5, 4


def _inputs(device: str) -> dict:
    g = torch.Generator().manual_seed(3)
    V = torch.randn(d, d, generator=g, dtype=torch.float64)
    y = ode.random_tokens(n, d, seed=1)
    return {k: v.to(device) for k, v in dict(
        y=y, ys=ode.random_tokens(2, n, d, seed=2), V=V, Vsym=(V + V.T) / 2, QK=torch.eye(d, dtype=torch.float64),
        v=torch.ones(d, dtype=torch.float64) / 2, P2=torch.randn(2, d, d, generator=g, dtype=torch.float64) / 3,
    ).items()}


CASES = {
    "attention": lambda a: ode.attention(a["y"], a["P2"], causal=True),
    "continuous_field": lambda a: ode.continuous_field(0.0, a["ys"], a["P2"], causal=True),
    "field with U and a modulated P": lambda a: ode.AttentionField(
        ode.DiagonalModulation(a["P2"], lambda t: torch.full((2, d), 1.0 + t, dtype=torch.float64)), U=a["P2"])(0.5, a["y"]),
    "discrete_step": lambda a: ode.discrete_step(a["y"], a["QK"], a["V"]),
    "single_head_step": lambda a: ode.single_head_step(a["y"], a["V"], a["QK"]),
    "oja_step": lambda a: ode.oja_step(a["y"], a["V"]),
    "iterate": lambda a: ode.iterate(lambda x: ode.oja_step(x, a["V"]), a["y"], 3)[1],
    "solve_tokens": lambda a: ode.solve_tokens(ode.AttentionField(a["QK"]), a["ys"], (0.0, 0.5)).ys,
    "solve fixed step": lambda a: ode.solve(ode.AttentionField(a["P2"]), a["y"], (0.0, 0.2), method="rk4", dt=0.05).ys,
    "project": lambda a: ode.project(2 * a["y"]),
    "consensus_error": lambda a: ode.consensus_error(a["ys"]),
    "alignment": lambda a: ode.alignment(a["y"], a["v"]),
    "lyapunov": lambda a: ode.lyapunov(a["y"], a["v"]),
    "consensus_reached": lambda a: ode.consensus_reached(a["ys"]),
    "hemisphere_witness": lambda a: ode.hemisphere_witness(a["y"]),
    "consensus_time": lambda a: ode.consensus_time(torch.arange(3.0, device=a["y"].device), a["ys"][0, :3, 0].abs()),
    "map_jacobian": lambda a: ode.map_jacobian(lambda x: ode.oja_step(x, a["V"]), a["y"], method="fd"),
    "tangent_basis": lambda a: ode.tangent_basis(a["y"]),
    "tangent_eigenvalues": lambda a: ode.tangent_eigenvalues(lambda x: ode.oja_step(x, a["Vsym"]),
                                                            ode.consensus_point(a["Vsym"], 0, 3), method="fd"),
    "consensus_point": lambda a: ode.consensus_point(a["Vsym"], 0, 3),
    "bipartite_point": lambda a: ode.bipartite_point(a["Vsym"], 0, 2, 2),
    "bipartite_eigenvalues": lambda a: ode.bipartite_eigenvalues(a["Vsym"], a["QK"], 0, 2, 2, 0.5),
    "principal_eigenvector": lambda a: ode.principal_eigenvector(a["V"])[1],
    "layer_matrix_dynamics": lambda a: ode.layer_matrix_dynamics(a["V"], n_tokens=3, runs=2, steps=3).series["E"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_ode_function_on_cuda_inputs(name) -> None:
    want = CASES[name](_inputs("cpu"))
    with fake_cuda():
        got = CASES[name](_inputs("cuda"))
        if isinstance(got, torch.Tensor):
            assert got.device.type == "cuda", f"{name} returned its tensor on {got.device}"
            got = got.cpu()
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
