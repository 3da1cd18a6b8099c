"""The W-ellipsoid E_W = {x : xᵀWx = 1} and the argument checks every ODE function shares.

Layout: tokens are the **rows** of the last two axes, ``y[..., i, :]`` is the papers' column
vector y_i; any leading axes are independent runs (the batch). Everything is float64 torch.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch

from ..discrete import w_norm  # noqa: F401  (re-exported: one map, steerformer/discrete.py)
from ..errors import NonFiniteStateError, bad_argument  # noqa: F401  (re-exported)
from ..tokens import MANIFOLD_TOL, as_real_tensor, check_tokens, random_tokens  # noqa: F401  (one place: steerformer/tokens.py)

DTYPE = torch.float64


def as_tensor(x: object, name: str) -> torch.Tensor:
    """Any array-like → float64 tensor (no copy when it already is one)."""
    return as_real_tensor(x, name)


def check_finite(x: torch.Tensor, name: str) -> torch.Tensor:
    if not bool(torch.isfinite(x).all()):
        raise bad_argument(name, "array with NaN/inf", "finite values")
    return x


def check_square_stack(x: object, name: str, d: int | None = None) -> torch.Tensor:
    """A (d, d) matrix or an (h, d, d) stack → (h, d, d) float64."""
    t = check_finite(as_tensor(x, name), name)
    if t.ndim == 2:
        t = t.unsqueeze(0)
    if t.ndim != 3 or t.shape[-1] != t.shape[-2]:
        raise bad_argument(name, f"shape {tuple(t.shape)}", "a (d, d) matrix or an (h, d, d) stack of them")
    if d is not None and t.shape[-1] != d:
        raise bad_argument(name, f"shape {tuple(t.shape)}", f"matrices of size {d}×{d} (the tokens have d={d})",
                           "Give one matrix per head of the tokens' dimension.")
    return t


def check_spd(W: object, d: int | None = None) -> torch.Tensor:
    """W must be symmetric positive definite (it defines the ellipsoid's metric)."""
    Wt = check_square_stack(W, "W", d)
    if Wt.shape[0] != 1:
        raise bad_argument("W", f"shape {tuple(Wt.shape)}", "one (d, d) matrix")
    Wt = Wt[0]
    scale = float(Wt.abs().max()) or 1.0
    if float((Wt - Wt.T).abs().max()) > 1e-12 * scale:
        raise bad_argument("W", "a non-symmetric matrix", "a symmetric positive definite matrix",
                           "Use (W + W.T) / 2 if the asymmetry is rounding.")
    _, info = torch.linalg.cholesky_ex(Wt)
    if int(info) != 0:
        eig = float(torch.linalg.eigvalsh(Wt).min())
        raise bad_argument("W", f"a symmetric matrix with smallest eigenvalue {eig:.3g}",
                           "a symmetric positive definite matrix")
    return Wt


def project(y: object, W: object | None = None) -> torch.Tensor:
    """π_W(y_i) = y_i / |y_i|_W for every token."""
    yt = as_tensor(y, "y")
    Wt = None if W is None else check_spd(W, yt.shape[-1])
    return yt / w_norm(yt, Wt)


def tangent(y: torch.Tensor, X: torch.Tensor, W: torch.Tensor | None = None) -> torch.Tensor:
    """(I − y_i y_iᵀ W) X_i: the tangent map of π_W at y_i on the ellipsoid (eq. 3)."""
    WX = X if W is None else X @ W  # rows: (W X_i)ᵀ since W is symmetric
    return X - y * (y * WX).sum(-1, keepdim=True)


def manifold_drift(y: torch.Tensor, W: torch.Tensor | None = None) -> float:
    """max_i | |y_i|_W − 1 |."""
    return float((w_norm(y, W) - 1.0).abs().max())


def check_time_span(t0: float, t1: float) -> tuple[float, float]:
    t0, t1 = float(t0), float(t1)
    if not (math.isfinite(t0) and math.isfinite(t1)):
        raise bad_argument("t_span", (t0, t1), "finite times")
    if t1 <= t0:
        raise bad_argument("t1", t1, f"t1 > t0 = {t0}", "Integration runs forward in time only.")
    return t0, t1


def check_positive(value: float, name: str) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise bad_argument(name, value, "a finite number > 0")
    return v


# Below this many state entries an intra-op thread pool costs more than it saves: on a loaded
# machine each OpenMP barrier can wait a whole scheduler slice (~40 ms measured for an 18×8
# GEMM on a busy 2-core host, against 2 µs single-threaded).
SMALL_STATE = 200_000


@contextlib.contextmanager
def threads_for(numel: int) -> Iterator[None]:
    """Run small problems single-threaded; restore torch's thread count afterwards."""
    if numel >= SMALL_STATE or torch.get_num_threads() == 1:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
