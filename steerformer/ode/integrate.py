"""Batched explicit Runge–Kutta integration with a manifold step.

What scipy already provides is reused: the Butcher tableaux, error-estimator weights and
dense-output coefficients are read from ``scipy.integrate.RK45`` (Dormand–Prince 5(4)) and
``scipy.integrate.DOP853`` (Hairer's 8(5,3)), and the step-size controller follows scipy's
``RungeKutta._step_impl``. What none provides is written here:

* **batching** — the state is a torch tensor (runs, …); all runs advance with one shared step
  whose error norm is the *largest* per-run RMS norm, so every run meets the tolerance it
  would get alone (scipy would take the RMS over the concatenation, which lets one run's error
  hide among the others);
* **the manifold step** — after every accepted step the state is projected back onto the
  ellipsoid (``project``), so |y_i|_W − 1 stays at rounding level (the field is tangent, the
  projection removes only the O(tol) normal component of the local error);
* save times hit exactly by the fixed-step method and by dense output for the adaptive ones;
* a non-finite state stops the integration and reports the last finite time.

Each method is a small class (:class:`RK4`, :class:`Dopri5`, :class:`Dop853`) on the one stepping
implementation of this module (:class:`RungeKutta`: stages, fixed and adaptive drivers): it
declares its Butcher tableau, its error estimate and its interpolant, in the shape of diffrax's
``Bosh3`` on ``AbstractERK``. A new method is a new subclass registered in :data:`SOLVERS`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch
from scipy.integrate import DOP853, RK45

from ..configs import progress_bar
from ..errors import bad_argument
from ..tokens import check_tokens
from .geometry import (
    DTYPE, NonFiniteStateError, as_tensor, check_finite, check_positive, check_time_span, manifold_drift, threads_for,
    w_norm,
)

log = logging.getLogger(__name__)

Field = Callable[[float, torch.Tensor], torch.Tensor]
Projection = Callable[[torch.Tensor], torch.Tensor]
Interpolant = Callable[[float], torch.Tensor]

SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 10.0  # scipy's controller constants


@dataclass(frozen=True)
class Tableau:
    """Butcher tableau of an explicit method: stage matrix ``A`` (strictly lower), weights ``B``,
    nodes ``C``; ``order`` of the solution and ``error_order`` of its embedded estimate (0: none)."""

    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    order: int
    error_order: int


class RungeKutta:
    """An explicit Runge–Kutta method: a tableau, an error estimate and an interpolant.

    The stepping is shared (:meth:`stages`, and the drivers :func:`_fixed` / :func:`_adaptive`);
    a method subclass provides :meth:`make_tableau` and, when ``adaptive``, :meth:`error_norm`
    and :meth:`interpolant`.
    """

    name: ClassVar[str] = ""
    #: False: fixed step only (``dt`` required)
    adaptive: ClassVar[bool] = True

    @cached_property
    def tableau(self) -> Tableau:
        return self.make_tableau()

    def make_tableau(self) -> Tableau:
        raise NotImplementedError

    def stages(self, state: "_State", t: float, y: torch.Tensor, f0: torch.Tensor, h: float) -> list[torch.Tensor]:
        """The stage derivatives K_s of one step of size h from (t, y), K_0 = f0 given."""
        tab = self.tableau
        K = [f0]
        for s in range(1, len(tab.C)):
            dy = _combine(K, tab.A[s, :s], h)
            K.append(state.f(t + tab.C[s] * h, y + dy))
        return K

    def error_norm(self, K: list[torch.Tensor], h: float, y: torch.Tensor, y_new: torch.Tensor,
                   rtol: float, atol: float, batched: bool) -> float:
        """Scaled norm of the local error estimate, the worst run; < 1 accepts the step.
        ``K`` ends with the derivative at the new point (FSAL)."""
        raise NotImplementedError(f"{self.name} has no error estimate (fixed step only)")

    def interpolant(self, state: "_State", t: float, h: float, y: torch.Tensor, f: torch.Tensor,
                    y_new: torch.Tensor, f_new: torch.Tensor, K: list[torch.Tensor]) -> Interpolant:
        """Dense output on [t, t + h]: a function of the time s."""
        raise NotImplementedError(f"{self.name} has no interpolant")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _scale(y: torch.Tensor, y_new: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    return torch.maximum(y.abs(), y_new.abs()).mul_(rtol).add_(atol)


class RK4(RungeKutta):
    """The classical fourth-order method; fixed step only."""

    name = "rk4"
    adaptive = False

    def make_tableau(self) -> Tableau:
        A = np.zeros((4, 4))
        A[1, 0], A[2, 1], A[3, 2] = 0.5, 0.5, 1.0
        return Tableau(A, np.array([1, 2, 2, 1]) / 6, np.array([0, 0.5, 0.5, 1.0]), 4, 0)


class Dopri5(RungeKutta):
    """Dormand–Prince 5(4), coefficients of ``scipy.integrate.RK45``; quartic interpolant."""

    name = "dopri5"

    def make_tableau(self) -> Tableau:
        return Tableau(RK45.A, RK45.B, RK45.C, 5, 4)

    def error_norm(self, K, h, y, y_new, rtol, atol, batched) -> float:
        n_per_run = y[0].numel() if batched else y.numel()
        e = _combine(K, RK45.E, h).div_(_scale(y, y_new, rtol, atol))
        return float(torch.sqrt(_run_norms(e, batched) / n_per_run).max())

    def interpolant(self, state, t, h, y, f, y_new, f_new, K) -> Interpolant:
        Q = [_combine(K, RK45.P[:, j], 1.0) for j in range(RK45.P.shape[1])]

        def value(s: float) -> torch.Tensor:
            x = (s - t) / h
            out = y.clone()
            for j, q in enumerate(Q):
                out.add_(q, alpha=h * x ** (j + 1))
            return out

        return value


class Dop853(RungeKutta):
    """Hairer's DOP853, 8(5,3), coefficients of ``scipy.integrate.DOP853``; order-7 interpolant."""

    name = "dop853"

    def make_tableau(self) -> Tableau:
        s = DOP853.n_stages
        return Tableau(DOP853.A[:s, :s], DOP853.B, DOP853.C[:s], 8, 7)

    def error_norm(self, K, h, y, y_new, rtol, atol, batched) -> float:
        # scipy's DOP853 combination of its 5th- and 3rd-order estimators, per run.
        scale = _scale(y, y_new, rtol, atol)
        n_per_run = y[0].numel() if batched else y.numel()
        e5 = _combine(K, DOP853.E5, 1.0).div_(scale)
        e3 = _combine(K, DOP853.E3, 1.0).div_(scale)
        n5, n3 = _run_norms(e5, batched), _run_norms(e3, batched)
        denom = n5 + 0.01 * n3
        per_run = torch.where(denom > 0, abs(h) * n5 / torch.sqrt(denom * n_per_run), torch.zeros_like(n5))
        return float(per_run.max())

    def interpolant(self, state, t, h, y, f, y_new, f_new, K) -> Interpolant:
        # Three extra stages, then the order-7 interpolant (Hairer's CONTD8).
        Kx = list(K)
        for s, (a, c) in enumerate(zip(DOP853.A_EXTRA, DOP853.C_EXTRA), start=DOP853.n_stages + 1):
            Kx.append(state.f(t + c * h, y + _combine(Kx, a[:s], h)))
        dy = y_new - y
        F = [dy, h * f - dy, 2 * dy - h * (f_new + f)]
        F += [_combine(Kx, DOP853.D[j], h) for j in range(DOP853.D.shape[0])]

        def value(s: float) -> torch.Tensor:
            x = (s - t) / h
            out = torch.zeros_like(y)
            for i, term in enumerate(reversed(F)):
                out.add_(term)
                out.mul_(x if i % 2 == 0 else 1 - x)
            return out.add_(y)

        return value


#: The methods by name (``solve(method=...)`` takes a name or an instance).
SOLVERS: dict[str, RungeKutta] = {m.name: m for m in (Dop853(), Dopri5(), RK4())}
#: The method names ``solve`` accepts.
METHODS = tuple(SOLVERS)


@dataclass
class Solution:
    """Saved states ``ys[k]`` (shape of y0) at ``ts[k]``, and what the integration cost."""

    ts: torch.Tensor
    ys: torch.Tensor
    method: str
    n_steps: int = 0
    n_rejected: int = 0
    n_evals: int = 0
    max_drift: float = 0.0


def _combine(K: list[torch.Tensor], coeffs: Sequence[float], scale: float) -> torch.Tensor | None:
    """scale · Σ_s coeffs[s] K[s], skipping zero coefficients (no temporaries beyond one)."""
    acc = None
    for c, k in zip(coeffs, K):
        if c == 0.0:
            continue
        if acc is None:
            acc = k * (c * scale)
        else:
            acc.add_(k, alpha=float(c * scale))
    return acc


def _run_norms(err: torch.Tensor, batched: bool) -> torch.Tensor:
    """Per-run sum of squares (runs = leading axis when batched)."""
    e2 = err.square()
    return e2.reshape(err.shape[0], -1).sum(1) if batched else e2.sum().reshape(1)


def solve(fun: Field, y0: torch.Tensor, t_span: tuple[float, float], *, method: str | RungeKutta = "dop853",
          dt: float | None = None, rtol: float = 1e-8, atol: float = 1e-10, save_at: Sequence[float] | None = None,
          project: Projection | None = None, drift: Callable[[torch.Tensor], float] | None = None,
          batched: bool | None = None, first_step: float | None = None, max_steps: int = 1_000_000,
          progress: bool = False) -> Solution:
    """Integrate ẏ = fun(t, y) from y0 over t_span, saving at ``save_at`` (default: t0 and t1).

    ``method``: "dop853" (adaptive, order 8, default), "dopri5" (adaptive, order 5) or "rk4"
    (fixed step ``dt``, required), or a :class:`RungeKutta` instance. Passing ``dt`` to an adaptive method runs its tableau with a
    fixed step instead (used to verify the order). ``project`` is applied after every step
    (the manifold step). ``batched`` (default: y0.ndim ≥ 3) makes the leading axis independent
    runs for the error norm.
    """
    t0, t1 = check_time_span(*t_span)
    if not isinstance(method, RungeKutta) and method not in SOLVERS:
        raise bad_argument("method", method, f"one of {METHODS}")
    solver = method if isinstance(method, RungeKutta) else SOLVERS[method]
    if dt is not None:
        dt = check_positive(dt, "dt")
    elif not solver.adaptive:
        raise bad_argument("dt", None, f"a step size > 0 for the fixed-step method {solver.name}")
    rtol, atol = check_positive(rtol, "rtol"), check_positive(atol, "atol")
    y0 = check_finite(as_tensor(y0, "y0"), "y0")
    if batched is None:
        batched = y0.ndim >= 3
    saves = np.array([t0, t1] if save_at is None else sorted(float(s) for s in save_at), dtype=float)
    if saves.size == 0 or saves[0] < t0 - 1e-12 or saves[-1] > t1 + 1e-12:
        raise bad_argument("save_at", list(saves[:5]), f"times within [t0, t1] = [{t0}, {t1}]")

    proj = project if project is not None else (lambda y: y)
    state = _State(fun, proj, drift, saves, t0, y0)
    bar = progress_bar(progress, "integrating", total=t1 - t0, unit="t")
    try:
        with threads_for(y0.numel()):
            if dt is not None:
                _fixed(state, solver, t0, t1, dt, bar)
            else:
                _adaptive(state, solver, t0, t1, rtol, atol, batched, first_step, max_steps, bar)
    finally:
        bar.close()
    return state.solution(solver.name)


class _State:
    """Bookkeeping shared by both drivers: evaluations, saves, drift, finiteness."""

    def __init__(self, fun, proj, drift, saves, t0, y0) -> None:
        self.fun, self.proj, self.drift_fn = fun, proj, drift
        self.saves = saves
        self.next_save = 0
        self.ts: list[float] = []
        self.ys: list[torch.Tensor] = []
        self.n_evals = self.n_steps = self.n_rejected = 0
        self.max_drift = 0.0
        self.t = t0
        self.y = y0.clone()
        self._save_through(t0, lambda s: self.y)

    def f(self, t: float, y: torch.Tensor) -> torch.Tensor:
        self.n_evals += 1
        return self.fun(t, y)

    def _save_through(self, t: float, value_at: Callable[[float], torch.Tensor]) -> None:
        while self.next_save < len(self.saves) and self.saves[self.next_save] <= t + 1e-12 * max(1, abs(t)):
            s = float(self.saves[self.next_save])
            self.ts.append(s)
            self.ys.append(self.proj(value_at(s)).clone())
            self.next_save += 1

    def accept(self, t_new: float, y_new: torch.Tensor, value_at=None) -> None:
        if not bool(torch.isfinite(y_new).all()):
            raise NonFiniteStateError(
                f"the state became non-finite after t={self.t:.6g} (step to t={t_new:.6g}); "
                "saved states up to that time are in .partial",
                t=self.t, partial=self.solution("partial"),
            )
        if self.drift_fn is not None:
            self.max_drift = max(self.max_drift, self.drift_fn(y_new))
        self.n_steps += 1
        self._save_through(t_new, value_at or (lambda s: y_new))
        self.t, self.y = t_new, y_new

    def fail(self, t: float, reason: str) -> None:
        raise NonFiniteStateError(
            f"the state or its derivative became non-finite near t={t:.6g} ({reason})",
            t=t, partial=self.solution("partial"),
        )

    def solution(self, method: str) -> Solution:
        ys = torch.stack(self.ys) if self.ys else torch.empty(0)
        return Solution(
            ts=torch.tensor(self.ts, dtype=DTYPE), ys=ys, method=method, n_steps=self.n_steps,
            n_rejected=self.n_rejected, n_evals=self.n_evals, max_drift=self.max_drift,
        )


def _fixed(state: _State, solver: RungeKutta, t0: float, t1: float, dt: float, bar) -> None:
    """Fixed step ≤ dt, with the grid broken at every save time so saves are exact."""
    marks = np.unique(np.concatenate([[t0], state.saves, [t1]]))
    for a, b in zip(marks[:-1], marks[1:]):
        m = max(1, math.ceil((b - a) / dt - 1e-9))
        h = (b - a) / m
        for k in range(m):
            t = a + k * h
            t_new = b if k == m - 1 else a + (k + 1) * h
            f0 = state.f(t, state.y)
            if not bool(torch.isfinite(f0).all()):
                state.fail(t, "derivative")
            K = solver.stages(state, t, state.y, f0, h)
            y_new = state.proj(state.y + _combine(K, solver.tableau.B, h))
            state.accept(float(t_new), y_new)
            bar.update(h)


def _adaptive(state, solver: RungeKutta, t0, t1, rtol, atol, batched, first_step, max_steps, bar) -> None:
    tab = solver.tableau
    exponent = -1.0 / (tab.error_order + 1)
    y = state.y
    f = state.f(t0, y)
    if not bool(torch.isfinite(f).all()):
        state.fail(t0, "derivative at t0")
    h_abs = first_step if first_step is not None else _initial_step(state, t0, y, f, t1, tab, rtol, atol, batched)
    t = t0
    while t < t1:
        if state.n_steps >= max_steps:
            raise bad_argument("max_steps", max_steps, f"more steps to reach t1={t1} (stopped at t={t:.6g})",
                               "Raise max_steps or loosen rtol/atol.")
        min_step = 10 * abs(np.nextafter(t, np.inf) - t)
        rejected = False
        while True:
            if h_abs < min_step:
                state.fail(t, f"step size underflow, h={h_abs:.3g}")
            t_new = min(t + h_abs, t1)
            h = t_new - t
            K = solver.stages(state, t, y, f, h)
            y_new = state.proj(y + _combine(K, tab.B, h))
            f_new = state.f(t_new, y_new)
            K.append(f_new)
            err = solver.error_norm(K, h, y, y_new, rtol, atol, batched)
            if not math.isfinite(err):
                state.fail(t, "error estimate")
            if err < 1:
                factor = MAX_FACTOR if err == 0 else min(MAX_FACTOR, SAFETY * err**exponent)
                if rejected:
                    factor = min(1.0, factor)
                h_abs = h * factor
                break
            state.n_rejected += 1
            h_abs = h * max(MIN_FACTOR, SAFETY * err**exponent)
            rejected = True
        dense = None
        if state.next_save < len(state.saves) and state.saves[state.next_save] < t_new:
            dense = solver.interpolant(state, t, h, y, f, y_new, f_new, K)
        state.accept(t_new, y_new, dense)
        bar.update(h)
        t, y, f = t_new, y_new, f_new


def _initial_step(state, t0, y0, f0, t1, tab, rtol, atol, batched) -> float:
    """Hairer's starting-step heuristic (as scipy's select_initial_step), worst run."""
    scale = y0.abs() * rtol + atol
    n = y0[0].numel() if batched else y0.numel()
    d0 = float(torch.sqrt(_run_norms(y0 / scale, batched) / n).min())
    d1 = float(torch.sqrt(_run_norms(f0 / scale, batched) / n).max())
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    h0 = min(h0, t1 - t0)
    f1 = state.f(t0 + h0, y0 + h0 * f0)
    d2 = float(torch.sqrt(_run_norms((f1 - f0) / scale, batched) / n).max()) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1 / (tab.error_order + 1))
    return min(100 * h0, h1, t1 - t0)


def solve_tokens(field, y0: object, t_span: tuple[float, float], **kwargs) -> Solution:
    """:func:`solve` for an :class:`~steerformer.ode.fields.AttentionField`: checks the tokens
    (shape, finite, on the ellipsoid — off-manifold tokens are refused) and wires the manifold
    step and the drift record to the field's W."""
    W = getattr(field, "W", None)
    y = check_tokens(y0, W=W, normalize="require", name="y0")
    if y.shape[-1] != field.d:
        raise bad_argument("y0", f"tokens of dimension {y.shape[-1]}", f"dimension d={field.d} (the size of P)")
    kwargs.setdefault("project", lambda z: z / w_norm(z, W))
    kwargs.setdefault("drift", lambda z: manifold_drift(z, W))
    return solve(field, y, t_span, **kwargs)
