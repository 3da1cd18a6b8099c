"""Initial tokens: the one random draw and the one argument check that the controlled dynamics
(docs/math.md §3), the steering measurements and the reference ODE module (§7) all use.

Tokens are the rows of the last two axes, ``x[..., i, :]`` (the papers' column vector x_i); any
leading axes are prompts / independent runs.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from .discrete import w_norm
from .errors import bad_argument

#: What :func:`check_tokens` does with tokens that are not on the unit sphere (or W-ellipsoid):
#: ``"project"`` scales every token onto it; ``"require"`` refuses tokens farther than
#: :data:`MANIFOLD_TOL` from it (a caller who passes unnormalized data has usually mixed up a
#: layout); ``"keep"`` takes them as given (raw initial tokens, ``--raw-initial``).
Normalize = Literal["project", "require", "keep"]
NORMALIZE = ("project", "require", "keep")

#: Tokens farther than this from the sphere/ellipsoid are refused under ``normalize="require"``.
MANIFOLD_TOL = 1e-8


def random_tokens(*shape: int | tuple[int, ...], seed: int | None = None, generator: torch.Generator | None = None,
                  W: torch.Tensor | None = None, distribution: str = "normal", hemisphere: object | None = None,
                  normalize: bool = True, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Random tokens on the unit sphere (or on the ellipsoid xᵀWx = 1), shape (..., n, d).

    The shape is given as integers, ``random_tokens(prompts, tokens, d, seed=0)``, or as one tuple,
    ``random_tokens((runs, n, d), generator=g)``. ``seed`` draws from a fresh generator (the
    controlled dynamics: 100 × 10 tokens, seed 0); ``generator`` continues a caller's stream;
    neither uses torch's global generator. ``distribution="normal"``: entries ~ N(0, 1), so the
    tokens are uniform on the sphere; ``"uniform"``: entries ~ U(−0.5, 0.5) then projected (the
    consensus paper, §5.1.2). ``hemisphere=v`` flips tokens with vᵀx < 0 into the open hemisphere
    vᵀx > 0. ``normalize=False`` returns the raw draws (Appendix B of the power-method paper says
    only "drawn from a normal distribution"). Drawn in float64, returned in ``dtype``.
    """
    dims = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else shape
    if not dims or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in dims):
        raise bad_argument("shape", dims, "positive integers (..., tokens, d)")
    if seed is not None and generator is not None:
        raise bad_argument("seed", seed, "seed= or generator=, not both")
    g = torch.Generator().manual_seed(int(seed)) if seed is not None else generator
    if distribution == "normal":
        y = torch.randn(dims, generator=g, dtype=torch.float64)
    elif distribution == "uniform":
        y = torch.rand(dims, generator=g, dtype=torch.float64) - 0.5
    else:
        raise bad_argument("distribution", distribution, "'normal' or 'uniform'")
    if hemisphere is not None:
        v = torch.as_tensor(np.asarray(hemisphere) if not isinstance(hemisphere, torch.Tensor) else hemisphere,
                            dtype=torch.float64)
        y = torch.where((y @ v).unsqueeze(-1) < 0, -y, y)
    if not normalize:
        return y.to(dtype)
    Wt = None if W is None else torch.as_tensor(W, dtype=torch.float64)
    return (y / w_norm(y, Wt)).to(dtype)


def as_real_tensor(x: object, name: str) -> torch.Tensor:
    """Any real array-like → float64 tensor (no copy when it already is one); anything else is an
    error naming ``name``."""
    try:
        t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    except Exception as exc:  # noqa: BLE001 - report what was passed, not torch's message
        raise bad_argument(name, type(x).__name__, "an array or tensor of real numbers") from exc
    if t.is_complex() or not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
        raise bad_argument(name, t.dtype, "a real-valued array")
    return t.to(torch.float64)


def check_tokens(tokens: object, d: int | None = None, *, normalize: Normalize, W: torch.Tensor | None = None,
                 name: str = "tokens", batched: bool = False) -> torch.Tensor:
    """Check user-given tokens and return them as a float64 tensor (a copy).

    Shape (..., n, d) with d ≥ 2 (``d``: the width they must have); finite; no zero token. With
    ``batched=True`` the result is exactly (prompts, tokens, d): a 2-D array is one prompt.
    ``normalize`` must be chosen explicitly (see :data:`Normalize`): ``"project"`` returns every
    token scaled onto the unit sphere (or the ellipsoid of ``W``), ``"require"`` refuses tokens off
    it, ``"keep"`` returns them as given.
    """
    if normalize not in NORMALIZE:
        raise bad_argument("normalize", normalize, f"one of {', '.join(NORMALIZE)}")
    x = as_real_tensor(tokens, name).clone()
    if batched and x.ndim == 2:
        x = x[None]
    if batched and (x.ndim != 3 or (d is not None and x.shape[-1] != d)):
        model = f" — the model has d={d}" if d is not None else ""
        raise bad_argument(name, f"array of shape {tuple(x.shape)}", f"shape (prompts, tokens, {d or 'd'}){model}")
    if x.ndim < 2 or x.shape[-1] < 2 or x.shape[-2] < 1:
        raise bad_argument(name, f"shape {tuple(x.shape)}", "tokens of shape (n, d) or (runs, n, d), d ≥ 2")
    if d is not None and x.shape[-1] != d:
        raise bad_argument(name, f"tokens of dimension {x.shape[-1]}", f"dimension d={d}")
    if not bool(torch.isfinite(x).all()):
        raise bad_argument(name, "an array with NaN/inf entries", "finite token vectors")
    Wt = None if W is None else torch.as_tensor(W, dtype=torch.float64)
    norms = w_norm(x, Wt)[..., 0]
    if normalize == "require":
        drift = float((norms - 1.0).abs().max())
        if drift > MANIFOLD_TOL:
            raise bad_argument(
                name, f"tokens with max | |y_i|_W − 1 | = {drift:.3g}",
                f"tokens on the ellipsoid yᵀWy = 1 (tolerance {MANIFOLD_TOL:g}; W = I: the unit sphere)",
                "Project them first with steerformer.ode.project(y0, W).",
            )
        return x
    zero = norms == 0
    if bool(zero.any()):
        idx = [int(i) for i in torch.nonzero(zero)[0]]
        where = f"prompt {idx[0]}, token {idx[1]}" if len(idx) == 2 else f"index {tuple(idx)}"
        raise bad_argument(name, f"zero vector at {where}",
                           "non-zero tokens (the dynamics normalize every token to the unit sphere)")
    return x / norms[..., None] if normalize == "project" else x
