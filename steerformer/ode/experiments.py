"""The papers' simulations as named, seeded setups (docs/math.md §7).

Continuous setups (5.1.1, 5.1.2, 5.1.3) integrate model (6); ``t1`` is the final time and
``dt`` switches from the adaptive DOP853 (default) to fixed-step RK4. Discrete setups
(fig13a, fig13b, bridge) iterate a map; for them ``t1`` is the number of layers (steps) and
``dt`` is the step size τ. Defaults are the papers' sizes.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from ..errors import bad_argument
from .diagnostics import alignment, consensus_error, consensus_time, in_open_hemisphere, lyapunov
from .fields import AttentionField, DiagonalModulation, discrete_step, iterate, single_head_step
from .geometry import DTYPE, random_tokens
from .integrate import solve_tokens
from .result import SetupResult
from .stability import bipartite_point, bipartite_stability, consensus_eigenvalues

log = logging.getLogger(__name__)

# The 4-decimal matrices of the arXiv version (docs/math.md §7); the ICML print rounds them to 2.
P1_511 = [[0.0805, -0.1929, 0.1991], [-0.2312, 0.3131, -0.2335], [0.1788, -0.1732, -0.1594]]
P2_511 = [[-0.3067, 0.0349, 0.1107], [0.0572, -0.0557, 0.1343], [0.1375, 0.1083, 0.1018]]
P_513 = [[0.3598, 0.4150, 0.1319], [0.0971, -0.0668, -0.2046], [0.1548, -0.2102, 0.1220]]
U_513 = [[-0.2590, 0.4965, 0.5609], [0.4965, -0.7174, -0.5003], [0.5609, -0.5003, -0.0247]]


def _t(x: object) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=float), dtype=DTYPE)


def _check_runs(runs: int) -> int:
    if int(runs) != runs or runs < 1:
        raise bad_argument("runs", runs, "an integer ≥ 1")
    return int(runs)


def p_511(t: float) -> torch.Tensor:
    """P_η(t) = D_η(t) P'_η of §5.1.1: D1 = 2 diag(cos 10πt, sin 10πt, cos 6πt), D2 = 2 diag(cos 6πt, sin 6πt, cos 4πt)."""
    pi = math.pi
    D = _t([[2 * math.cos(10 * pi * t), 2 * math.sin(10 * pi * t), 2 * math.cos(6 * pi * t)],
            [2 * math.cos(6 * pi * t), 2 * math.sin(6 * pi * t), 2 * math.cos(4 * pi * t)]])
    return D.unsqueeze(-1) * torch.stack([_t(P1_511), _t(P2_511)])


def p_513(t: float) -> torch.Tensor:
    """P(t) = D(t) P' of §5.1.3, D = 2 diag(cos 10πt, sin 10πt, cos 6πt)."""
    pi = math.pi
    D = _t([2 * math.cos(10 * pi * t), 2 * math.sin(10 * pi * t), 2 * math.cos(6 * pi * t)])
    return (D.unsqueeze(-1) * _t(P_513)).unsqueeze(0)


def _integrate(field, y0, t1, dt, rtol, save_points, progress, method="dop853"):
    ts = np.linspace(0.0, t1, save_points)
    kw = dict(save_at=ts, progress=progress)
    if dt is None:
        kw.update(method=method, rtol=rtol, atol=rtol * 1e-2)
    else:
        kw.update(method="rk4", dt=dt)
    return solve_tokens(field, y0, (0.0, t1), **kw)


def _solver_summary(sol) -> dict:
    return {"n_steps": sol.n_steps, "n_evals": sol.n_evals, "n_rejected": sol.n_rejected,
            "max_manifold_drift": sol.max_drift}


def setup_5_1_1(*, runs: int = 1, seed: int = 0, t1: float = 10.0, dt: float | None = None,
                rtol: float = 1e-8, save_points: int = 401, progress: bool = False) -> SetupResult:
    """Theorem 3.2: 10 tokens on S², full attention, h = 2, U = I, time-varying P_η(t).

    Initial tokens are uniform on the hemisphere vᵀy > 0 with v = (1, 0, 0) (the theorem's
    basin; the paper's figure shows them in one hemisphere), so V(t) = max_i(1 − vᵀy_i) is the
    Lyapunov function (7) of the proof and must not increase.
    """
    runs = _check_runs(runs)
    g = torch.Generator().manual_seed(int(seed))
    v = _t([1.0, 0.0, 0.0])
    y0 = random_tokens((runs, 10, 3), generator=g, hemisphere=v)
    field = AttentionField(p_511)
    sol = _integrate(field, y0, t1, dt, rtol, save_points, progress)
    V = lyapunov(sol.ys, v).numpy()  # (T, runs)
    E = consensus_error(sol.ys).numpy()
    tf = np.linspace(0, min(t1, 2.0), 801)
    pn = np.array([torch.linalg.matrix_norm(p_511(t)).numpy() for t in tf])  # (T', 2)
    summary = {
        "start_in_hemisphere": all(in_open_hemisphere(y0[r]) for r in range(runs)),
        "V_max_increase": float(np.max(np.diff(V, axis=0), initial=0.0)), "V_final_max": float(V[-1].max()),
        "E_final_max": float(E[-1].max()), "consensus_time_E<1e-6": consensus_time(sol.ts.numpy(), E, 1e-6).tolist(),
        **_solver_summary(sol),
    }
    return SetupResult(
        "5.1.1", "Theorem 3.2: consensus from a hemisphere, 2 heads, time-varying P (tokens on S²)",
        {"runs": runs, "seed": seed, "t1": t1, "dt": dt, "rtol": rtol, "n": 10, "d": 3, "heads": 2,
         "U": "identity", "attention": "full", "normalization": "sqrt", "v": [1, 0, 0]},
        sol.ts.numpy(), {"V": V, "E": E}, summary,
        trajectory={"tokens": sol.ys.numpy()},
        extra={"P_norm_times": tf, "P_frobenius_norms": pn},
    )


def p_512(d: int, heads: int, g: torch.Generator) -> DiagonalModulation:
    """§5.1.2: P'_η ~ U[−0.5, 0.5]^{d×d}, (D_η)_jj(t) = |2 sin(ω_j t + φ_j)|, ω ~ U(0,1), φ ~ U(0,2π)."""
    Pp = torch.rand((heads, d, d), generator=g, dtype=DTYPE) - 0.5
    om = torch.rand((heads, d), generator=g, dtype=DTYPE)
    ph = 2 * math.pi * torch.rand((heads, d), generator=g, dtype=DTYPE)
    return DiagonalModulation(Pp, lambda t: (2.0 * torch.sin(om * t + ph)).abs_())


def setup_5_1_2(*, runs: int = 100, seed: int = 0, t1: float = 200.0, dt: float | None = None,
                rtol: float = 1e-6, save_points: int = 201, progress: bool = False,
                n: int = 50, d: int = 500, heads: int = 2) -> SetupResult:
    """Theorem 4.2: causal attention, 50 tokens on S⁴⁹⁹, h = 2, U = I; E for 100 runs.

    The matrices are drawn once (shared by the runs); the runs differ in their initial tokens,
    U(−0.5, 0.5) entries projected to the sphere. Each token should reach y_1(0) (fixed).
    At the default size each evaluation of all 100 runs costs ≈ 0.2–0.4 s on 2 CPU cores and
    t ∈ [0, 200] takes thousands of them: shorten with ``t1``/``runs`` for a quick look.
    """
    runs = _check_runs(runs)
    g = torch.Generator().manual_seed(int(seed))
    P = p_512(d, heads, g)
    y0 = random_tokens((runs, n, d), generator=g, distribution="uniform")
    field = AttentionField(P, causal=True)
    # |2 sin(ω_j t + φ_j)| has a kink wherever a sine crosses zero — hundreds per unit time over
    # the 2·d entries — so P(t) is only Lipschitz and an 8th-order method loses its edge: at
    # rtol 1e-8 on [0, 5] DOP853 needs ≈ 2 100 evaluations, Dormand–Prince 5(4) ≈ 450.
    sol = _integrate(field, y0, t1, dt, rtol, save_points, progress, method="dopri5")
    E = consensus_error(sol.ys).numpy()
    dist = torch.linalg.vector_norm(sol.ys[-1] - y0[:, :1, :], dim=-1).amax(-1).numpy()
    summary = {
        "E_initial_mean": float(E[0].mean()), "E_final_max": float(E[-1].max()),
        "E_final_median": float(np.median(E[-1])), "max_distance_to_y1(0)": float(dist.max()),
        "first_token_moved": float(torch.linalg.vector_norm(sol.ys[-1][:, 0] - y0[:, 0], dim=-1).max()),
        "consensus_time_E<1e-4_median": float(np.nanmedian(consensus_time(sol.ts.numpy(), E, 1e-4))),
        **_solver_summary(sol),
    }
    return SetupResult(
        "5.1.2", "Theorem 4.2: causal attention, E along 100 runs on S^499 (2 heads, U = I)",
        {"runs": runs, "seed": seed, "t1": t1, "dt": dt, "rtol": rtol, "n": n, "d": d, "heads": heads,
         "U": "identity", "attention": "causal", "normalization": "sqrt"},
        sol.ts.numpy(), {"E": E}, summary,
    )


def setup_5_1_3(*, runs: int = 1, seed: int = 0, t1: float = 60.0, dt: float | None = None,
                rtol: float = 1e-8, save_points: int = 601, progress: bool = False) -> SetupResult:
    """Theorem 4.5: causal, h = 1, 10 tokens on S², symmetric U with simple top eigenvalue
    λ ≈ 0.439 > 0 and eigenvector v; tokens start in the hemisphere vᵀy > 0 and go to v."""
    runs = _check_runs(runs)
    U = _t(U_513)
    lam, vec = torch.linalg.eigh(U)
    v = vec[:, -1]
    v = v if v[0] >= 0 else -v  # sign fixed so the setup is reproducible
    g = torch.Generator().manual_seed(int(seed))
    y0 = random_tokens((runs, 10, 3), generator=g, hemisphere=v)
    field = AttentionField(p_513, U.unsqueeze(0), causal=True)
    sol = _integrate(field, y0, t1, dt, rtol, save_points, progress)
    V1 = (1 - sol.ys[..., 0, :] @ v).numpy()
    V2 = (1 - sol.ys[..., 1, :] @ v).numpy()
    dist = torch.linalg.vector_norm(sol.ys[-1] - v, dim=-1).amax(-1).numpy()
    summary = {
        "U_eigenvalues": lam.numpy().tolist(), "v": v.numpy().tolist(), "max_distance_to_v": float(dist.max()),
        "V1_final_max": float(V1[-1].max()), "V2_final_max": float(V2[-1].max()), **_solver_summary(sol),
    }
    return SetupResult(
        "5.1.3", "Theorem 4.5: causal, one head, symmetric U: tokens → v (tokens on S²)",
        {"runs": runs, "seed": seed, "t1": t1, "dt": dt, "rtol": rtol, "n": 10, "d": 3, "heads": 1,
         "attention": "causal", "normalization": "sqrt"},
        sol.ts.numpy(), {"V1": V1, "V2": V2}, summary,
        trajectory={"tokens": sol.ys.numpy()}, extra={"v": v.numpy()},
    )


# -- Appendix D (power-method paper), discrete maps --------------------------------------------
def _fig13_value_matrix(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric V = Q diag(1.0, 0.4, −0.5) Qᵀ with a seeded random rotation Q."""
    rng = np.random.default_rng(1000 + int(seed))
    Q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    lam = np.array([1.0, 0.4, -0.5])
    return Q @ np.diag(lam) @ Q.T, lam


def setup_fig13a(*, runs: int = 1, seed: int = 0, t1: float = 60, dt: float | None = None,
                 heads: int = 5, n: int = 10, **_: object) -> SetupResult:
    """Fig. 13(a): d = 3, 10 tokens, single-head map (8) vs a 5-head map (3), τ = 1.

    Single head: symmetric V, P = QᵀK with U[−0.5, 0.5] entries. Multi-head: U_η = V/h + E_η with
    random symmetric E_η summing to zero, so F = Σ U_η = V, and random P_η. Both should reach
    consensus at ±v_1 (the principal eigenvector of V = F); ρ(x_i, v_1) → 1.
    """
    runs = _check_runs(runs)
    steps = int(t1)
    tau = 1.0 if dt is None else float(dt)
    V, lam = _fig13_value_matrix(seed)
    rng = np.random.default_rng(int(seed))
    P1 = rng.uniform(-0.5, 0.5, (3, 3))
    Ph = rng.uniform(-0.5, 0.5, (heads, 3, 3))
    Eh = rng.uniform(-0.5, 0.5, (heads, 3, 3))
    Eh = (Eh + Eh.transpose(0, 2, 1)) / 2
    Eh -= Eh.mean(0)
    Uh = V / heads + Eh
    g = torch.Generator().manual_seed(int(seed))
    x0 = random_tokens((runs, n, 3), generator=g)
    v1 = _t(np.linalg.eigh(V)[1][:, -1])
    _, xs1 = iterate(lambda z: single_head_step(z, V, P1, tau=tau), x0, steps)
    _, xsh = iterate(lambda z: discrete_step(z, Ph, Uh, tau=tau), x0, steps)
    rho1, rhoh = alignment(xs1, v1).numpy(), alignment(xsh, v1).numpy()  # (T, runs, n)
    summary = {
        "V_eigenvalues": lam.tolist(), "F_equals_V": bool(np.allclose(Uh.sum(0), V)),
        "single_head_final_min_rho": float(rho1[-1].min()), "multi_head_final_min_rho": float(rhoh[-1].min()),
        "v1_consensus_eigenvalue_modulus": float(np.abs(consensus_eigenvalues(V, 0, n, tau)).max()),
    }
    return SetupResult(
        "fig13a", "Appendix D Fig. 13(a): single-head (8) vs 5-head (3) map reach consensus at v1",
        {"runs": runs, "seed": seed, "steps": steps, "tau": tau, "n": n, "d": 3, "heads": heads},
        np.arange(steps + 1, dtype=float), {"rho_single": rho1, "rho_multi": rhoh}, summary,
        trajectory={"tokens_single": xs1.numpy(), "tokens_multi": xsh.numpy()},
        extra={"V": V, "v1": v1.numpy()},
    )


# Chosen so the bipartite point (8 tokens at v1, 2 at −v1) is stable with spectral radius 0.991:
# σ = v1ᵀPv1 = 0.97 sits just above the stability threshold (≈ 0.955), which keeps the basin small.
FIG13B_SIGMA, FIG13B_TAU, FIG13B_SPLIT = 0.97, 0.9, (8, 2)


def setup_fig13b(*, runs: int = 1, seed: int = 0, t1: float = 1500, dt: float | None = None,
                 small: float = 0.05, large: float = 0.3, jitter: float = 1e-3, **_: object) -> SetupResult:
    """Fig. 13(b): a locally stable bipartite point of map (8) aligned with v1, perturbed twice.

    V as in fig13a, P = QᵀK = 0.97·I, τ = 0.9 < 1/‖V‖, 8 tokens at v1 and 2 at −v1; Theorem 3
    (and the numeric Jacobian) say it is stable. The perturbation turns the 2 minority tokens by
    an angle ``small`` or ``large`` (radians) from −v1 toward v2 — along v2 the basin's edge lies
    between 0.15 and 0.2 rad — and adds a seeded random jitter of norm ``jitter`` to every token.
    The small one is reabsorbed; after the large one the 2 tokens migrate and consensus at v1
    follows (the paper's "tiny basin").
    """
    runs = _check_runs(runs)
    steps = int(t1)
    tau = FIG13B_TAU if dt is None else float(dt)
    V, lam = _fig13_value_matrix(seed)
    P = FIG13B_SIGMA * np.eye(3)
    n1, n2 = FIG13B_SPLIT
    report = bipartite_stability(V, P, 0, n1, n2, tau)
    xb = bipartite_point(V, 0, n1, n2)
    vecs = np.linalg.eigh(V)[1]
    v1, v2 = _t(vecs[:, -1]), _t(vecs[:, -2])
    v1 = v1 if float(v1 @ xb[0]) > 0 else -v1
    g = torch.Generator().manual_seed(int(seed))
    out: dict[str, np.ndarray] = {}
    traj: dict[str, np.ndarray] = {}
    summary: dict[str, object] = {
        "theorem3_stable": report.stable, "theorem3_conditions": report.conditions,
        "spectral_radius": float(np.abs(report.spectrum.eigenvalues).max()), "sigma": report.spectrum.sigma,
    }
    for label, angle in (("small", small), ("large", large)):
        x0 = xb.expand(runs, *xb.shape).clone()
        x0[:, n1:] = -v1 * math.cos(angle) + v2 * math.sin(angle)
        noise = torch.randn(x0.shape, generator=g, dtype=DTYPE)
        x0 = x0 + jitter * noise / torch.linalg.vector_norm(noise, dim=-1, keepdim=True)
        x0 = x0 / torch.linalg.vector_norm(x0, dim=-1, keepdim=True)
        _, xs = iterate(lambda z: single_head_step(z, V, P, tau=tau), x0, steps)
        out[f"distance_{label}"] = torch.linalg.vector_norm(xs - xb, dim=-1).amax(-1).numpy()
        out[f"v1_component_{label}"] = (xs @ v1).numpy()
        traj[f"tokens_{label}"] = xs.numpy()
        summary[f"{label}_final_distance_max"] = float(out[f"distance_{label}"][-1].max())
        summary[f"{label}_final_E_max"] = float(consensus_error(xs[-1]).max())
    summary["small_returns"] = summary["small_final_distance_max"] < 1e-6
    summary["large_escapes_to_consensus"] = summary["large_final_E_max"] < 1e-6
    return SetupResult(
        "fig13b", "Appendix D Fig. 13(b): stable bipartite point of map (8); small perturbation returns, larger escapes",
        {"runs": runs, "seed": seed, "steps": steps, "tau": tau, "n1": n1, "n2": n2, "d": 3,
         "sigma": FIG13B_SIGMA, "small": small, "large": large, "jitter": jitter},
        np.arange(steps + 1, dtype=float), out, summary, trajectory=traj,
        extra={"V": V, "v1": v1.numpy(), "analytic_eigenvalue_moduli": np.abs(report.spectrum.eigenvalues)},
    )
