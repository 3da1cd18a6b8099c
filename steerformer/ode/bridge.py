"""The discrete map (3) driven by a real layer matrix F = W_O·V (docs/math.md §3 and §7).

Array-based: F comes from anywhere — typically ``steerformer.layer_matrices(model).matrices[k]``
— and the attention is either random (random P_η = Q_ηᵀK_η/√d_h) or given (the checkpoint's
own QᵀK per head). Models meet this code only through those arrays.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import bad_argument
from ..spectra import sorted_eig
from .diagnostics import alignment, consensus_error
from .fields import discrete_step, iterate
from .geometry import DTYPE, as_tensor, check_square_stack, random_tokens
from .result import SetupResult


def principal_eigenvector(F: torch.Tensor) -> tuple[complex, np.ndarray]:
    """λ1 ordered by real part (docs/math.md §2) and its unit right eigenvector.

    For a complex λ1 this returns the real part of its eigenvector only; the proper measure
    there is the 2-D subspace correlation of docs/math.md §4, which belongs to the statistics module.
    """
    vals, vecs = sorted_eig(F)
    v = vecs[:, 0].real.cpu().numpy()
    return complex(vals[0]), v / np.linalg.norm(v)


def random_layer_matrix(d: int = 64, *, spike: float = 3.0, seed: int = 0) -> torch.Tensor:
    """A stand-in layer matrix G/√d + spike·u uᵀ (G Gaussian, u a random unit vector): its bulk has
    spectral radius ≈ 1 and the rank-one spike gives a clear principal eigenvalue ≈ spike."""
    g = torch.Generator().manual_seed(int(seed))
    G = torch.randn((d, d), generator=g, dtype=DTYPE) / math.sqrt(d)
    u = torch.randn(d, generator=g, dtype=DTYPE)
    u = u / u.norm()
    return G + spike * torch.outer(u, u)


def layer_matrix_dynamics(F: object, *, P: object | None = None, heads: int = 1, n_tokens: int = 10, runs: int = 100,
                          steps: int = 50, tau: float = 1.0, seed: int = 0, x0: object | None = None,
                          name: str = "bridge") -> SetupResult:
    """Run x_i⁺ = N(x_i + τ Σ_η F_η Σ_j A^η_ij x_j) from random unit tokens.

    ``F``: one (d, d) layer matrix (shared by all heads, each head gets F/h so Σ_η F_η = F) or an
    (h, d, d) stack of per-head W_η V_η. ``P``: None → random Gaussian Q, K (d_h × d, entries
    N(0, 1/d)) with the 1/√d_h score scale; else an (h, d, d) stack of QᵀK (scale included).
    Reports E and the alignment ρ(x_i, v1(F)) after every layer.
    """
    Ft = check_square_stack(F, "F")
    d = Ft.shape[-1]
    h = Ft.shape[0] if Ft.shape[0] > 1 else int(heads)
    if h < 1:
        raise bad_argument("heads", heads, "an integer ≥ 1")
    Fh = Ft if Ft.shape[0] > 1 else (Ft / h).expand(h, d, d)
    g = torch.Generator().manual_seed(int(seed))
    if P is None:
        dh = max(1, d // h)
        Q = torch.randn((h, dh, d), generator=g, dtype=DTYPE) / math.sqrt(d)
        K = torch.randn((h, dh, d), generator=g, dtype=DTYPE) / math.sqrt(d)
        Pt = (Q.transpose(1, 2) @ K / math.sqrt(dh)).to(Ft.device)  # drawn on the host: the same on any device
        attention = "random"
    else:
        Pt = check_square_stack(P, "P", d)
        if Pt.shape[0] != h:
            raise bad_argument("P", f"{Pt.shape[0]} matrices", f"one per head ({h})")
        attention = "given"
    if x0 is None:
        x = random_tokens((int(runs), int(n_tokens), d), generator=g).to(Ft.device)
    else:
        x = as_tensor(x0, "x0")
        if x.shape[-1] != d:
            raise bad_argument("x0", f"shape {tuple(x.shape)}", f"tokens of dimension d={d}")
    lam1, v1 = principal_eigenvector(Ft.sum(0) if Ft.shape[0] > 1 else Ft[0])
    ks, xs = iterate(lambda z: discrete_step(z, Pt, Fh, tau=tau, normalization="softmax"), x, int(steps))
    E = consensus_error(xs).cpu().numpy()  # (T, runs)
    rho = alignment(xs, torch.as_tensor(v1, device=xs.device)).cpu().numpy().mean(-1)  # (T, runs)
    summary = {
        "lambda1": [lam1.real, lam1.imag], "E_final_mean": float(E[-1].mean()),
        "rho_v1_initial_mean": float(rho[0].mean()), "rho_v1_final_mean": float(rho[-1].mean()),
    }
    return SetupResult(
        name, "Discrete map (3) driven by a layer matrix F with " + attention + " attention",
        {"d": d, "heads": h, "n_tokens": n_tokens, "runs": int(x.shape[0]) if x.ndim == 3 else 1,
         "steps": int(steps), "tau": tau, "seed": seed, "attention": attention},
        ks.numpy().astype(float), {"E": E, "rho_v1": rho}, summary,
    )
