"""One discrete map x⁺ = N_W(x + τG): the dynamics step and the ODE module's discrete step are the
same computation."""

from __future__ import annotations

import torch



def test_dynamics_step_and_discrete_step_are_one_map() -> None:
    """With full-rank heads and no masks/scale/bias the model-side step and the ODE module's step
    are the same map; both equal a transcription of x⁺ = N(x + τ Σ_h F_h A_h x)."""
    import steerformer.discrete as discrete
    from steerformer.ode.fields import discrete_step

    g = torch.Generator().manual_seed(3)
    d, h, n = 4, 2, 5
    y = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    P = torch.randn(h, d, d, generator=g, dtype=torch.float64) / 3
    U = torch.randn(h, d, d, generator=g, dtype=torch.float64) / 3
    A = torch.softmax(torch.einsum("bid,hde,bje->bhij", y, P, y), dim=-1)
    z = y + 0.5 * torch.einsum("bhij,hed,bjd->bie", A, U, y)
    want = z / z.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(discrete_step(y, P, U, tau=0.5, normalization="softmax"), want, rtol=0, atol=1e-14)
    calls = []
    real = discrete.residual_map
    import steerformer.ode.fields as fields

    fields.residual_map = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        discrete_step(y, P, U, tau=0.5, normalization="softmax")
    finally:
        fields.residual_map = real
    assert calls == [1]
    import steerformer.dynamics as dyn

    assert dyn.residual_map is real and fields.residual_map is real
