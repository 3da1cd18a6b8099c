"""Vector fields and maps of the attention dynamics (docs/math.md §7).

* :class:`AttentionField` — the continuous model (6) of the consensus paper on the W-ellipsoid:
  ẏ_i = (I − y_i y_iᵀ W) Σ_η Σ_j α^η_ij(t, y) U_η(t) y_j, h heads, full or causal attention,
  P_η(t) = Q_ηᵀK_η and U_η(t) constants or callables of t.
* :func:`discrete_step` — the discrete model (1)/(3): y_i⁺ = π_W(y_i + τ Σ_η Σ_j α^η_ij U_η y_j).
* :func:`single_head_step` — map (8): x_i⁺ = N(x_i + τ Σ_j a_ij V x_j), plain softmax.
* :func:`oja_step` — the multiagent Oja map (9): x_i⁺ = N(x_i + τ V x̄).

Tokens are rows: ``y[..., i, :]`` is y_i, so y_iᵀ P y_j is ``(y @ P @ y.T)[i, j]`` and the sum
Σ_j α_ij U y_j is the row ``(A @ y @ U.T)[i]``. Leading axes are independent runs that share
the parameters, which is what lets one GEMM serve every run.
"""

from __future__ import annotations

import math
from typing import Callable, Union

import torch

from ..discrete import residual_map
from ..errors import bad_argument
from .geometry import (
    DTYPE, NonFiniteStateError, as_tensor, check_positive, check_spd, check_square_stack, tangent, threads_for,
)

MatrixSpec = Union[object, Callable[[float], object]]
NORMALIZATIONS = ("sqrt", "softmax")


def _norm_constant(normalization: str, d: int) -> float:
    # "sqrt": Z_i = √(n+1) Σ_j exp(·) with n+1 = d, so each attention row sums to 1/√d [src eq. 6].
    if normalization == "sqrt":
        return math.sqrt(d)
    if normalization == "softmax":
        return 1.0
    raise bad_argument("normalization", normalization, f"one of {NORMALIZATIONS}")


def attention(
    y: torch.Tensor, P: torch.Tensor, *, causal: bool = False, normalization: str = "sqrt"
) -> torch.Tensor:
    """α^η_ij for tokens y (..., n, d) and P (h, d, d): returns (..., h, n, n)."""
    S = torch.einsum("...id,hde,...je->...hij", y, P, y)
    if causal:
        n = y.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=y.device).triu(1)
        S = S.masked_fill(mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A / _norm_constant(normalization, y.shape[-1])


class DiagonalModulation:
    """P_η(t) = D_η(t) P'_η with diagonal D_η(t) (the papers' §5.1 construction), callable as t → (h, d, d).

    ``diag(t)`` returns the diagonals, shape (h, d). :class:`AttentionField` recognizes this
    form and scales the rows of [P'_1 | … | P'_h] in place instead of building P(t) anew.
    """

    def __init__(self, P_prime: object, diag: Callable[[float], object]) -> None:
        self.P_prime = check_square_stack(P_prime, "P_prime")
        self.diag = diag
        h, d, _ = self.P_prime.shape
        self._cat = self.P_prime.permute(1, 0, 2).reshape(d, h, d).contiguous()  # [k, η, j] = P'_η[k, j]

    def diagonals(self, t: float) -> torch.Tensor:
        D = as_tensor(self.diag(t), "diag(t)").to(self.P_prime.device)
        if D.shape != self.P_prime.shape[:2]:
            raise bad_argument("diag(t)", f"shape {tuple(D.shape)}", f"shape {tuple(self.P_prime.shape[:2])} (h, d)")
        return D

    def __call__(self, t: float) -> torch.Tensor:
        return self.diagonals(t).unsqueeze(-1) * self.P_prime

    def cat_columns(self, t: float, out: torch.Tensor) -> torch.Tensor:
        """[P_1(t) | … | P_h(t)] (d, h·d) written into ``out``: row k of block η scaled by D_η(t)_k."""
        h, d, _ = self.P_prime.shape
        torch.mul(self._cat, self.diagonals(t).T.unsqueeze(-1), out=out.view(d, h, d))
        return out


class AttentionField:
    """The continuous model (6), callable as ``field(t, y) -> ẏ`` on tokens (..., n, d).

    P, U: an (h, d, d) stack, one (d, d) matrix (h = 1), or a callable ``t -> (h, d, d)``.
    ``U=None`` means U_η = I for every head (Theorems 3.2 and 4.2), which skips the U-products.
    ``W=None`` means the unit sphere. ``normalization``: "sqrt" (rows sum to 1/√d, the
    papers' model) or "softmax" (rows sum to 1).
    """

    def __init__(self, P: MatrixSpec, U: MatrixSpec | None = None, W: object | None = None, *, causal: bool = False,
                 normalization: str = "sqrt") -> None:
        self._P_fn = P if callable(P) else None
        P0 = check_square_stack(P(0.0) if callable(P) else P, "P")
        self.h, self.d = P0.shape[0], P0.shape[-1]
        self.device = P0.device  # where P lives is where the field computes
        self._P_const = None if callable(P) else P0
        self._U_fn = U if callable(U) else None
        self._U_const = None
        if U is not None:
            U0 = check_square_stack(U(0.0) if callable(U) else U, "U", self.d)
            if U0.shape[0] != self.h:
                raise bad_argument("U", f"{U0.shape[0]} matrices", f"one per head of P ({self.h})")
            self._U_const = None if callable(U) else U0
        self.identity_U = U is None
        self.W = None if W is None else check_spd(W, self.d)
        self.causal = bool(causal)
        self.normalization = normalization
        self.scale = _norm_constant(normalization, self.d)
        self.n_evals = 0
        # P_η side by side, [P_1 | … | P_h] (d, h·d): one GEMM computes y_iᵀP_η for all heads.
        self._Pcat = None if callable(P) else self._cat_columns(P0)
        self._Pbuf: torch.Tensor | None = None
        self._Ucat = None if self._U_const is None else self._stack_transposed(self._U_const)

    # -- parameters at time t -------------------------------------------------------------
    @staticmethod
    def _cat_columns(P: torch.Tensor) -> torch.Tensor:
        h, d, _ = P.shape
        return P.permute(1, 0, 2).reshape(d, h * d).contiguous()

    @staticmethod
    def _stack_transposed(U: torch.Tensor) -> torch.Tensor:
        h, d, _ = U.shape
        return U.transpose(1, 2).reshape(h * d, d).contiguous()  # rows: [U_1ᵀ; …; U_hᵀ]

    def P(self, t: float) -> torch.Tensor:
        """P_η(t) as an (h, d, d) tensor."""
        return self._P_const if self._P_fn is None else check_square_stack(self._P_fn(t), "P(t)", self.d)

    def U(self, t: float) -> torch.Tensor | None:
        """U_η(t) as an (h, d, d) tensor, or None for the identity."""
        if self.identity_U:
            return None
        return self._U_const if self._U_fn is None else check_square_stack(self._U_fn(t), "U(t)", self.d)

    # -- evaluation --------------------------------------------------------------------------
    def __call__(self, t: float, y: torch.Tensor) -> torch.Tensor:
        self.n_evals += 1
        single = y.ndim == 2
        yb = y.unsqueeze(0) if single else y.reshape(-1, *y.shape[-2:])
        B, n, d = yb.shape
        h = self.h
        Pcat = self._P_at(t)
        # Z[b, i·h + η, :] = y_iᵀ P_η — one (B·n, d) × (d, h·d) GEMM for every run and head.
        Z = (yb.reshape(B * n, d) @ Pcat).view(B, n * h, d)
        S = torch.bmm(Z, yb.transpose(1, 2)).view(B, n, h, n)  # S[b,i,η,j] = y_iᵀ P_η y_j
        if self.causal:
            S.masked_fill_(_upper_mask(n, S.device), float("-inf"))
        # one fused softmax pass (fewer parallel regions: each can stall on a busy host)
        S = torch.softmax(S, dim=-1)
        if self.identity_U:
            A = S.sum(dim=2)
            if self.scale != 1.0:
                A.mul_(1.0 / self.scale)  # α = softmax / √d
            G = torch.bmm(A, yb)  # Σ_η A_η y: heads summed before the product
        else:
            Ucat = self._Ucat if self._U_fn is None else self._stack_transposed(self.U(t))
            if self.scale != 1.0:
                S.mul_(1.0 / self.scale)
            AY = torch.bmm(S.view(B, n * h, n), yb)  # rows (i, η): Σ_j α^η_ij y_jᵀ
            G = (AY.view(B * n, h * d) @ Ucat).view(B, n, d)  # Σ_η (Σ_j α^η_ij y_j)ᵀ U_ηᵀ
        out = self._tangent(yb, G)
        return out[0] if single else out.view(y.shape)

    def _P_at(self, t: float) -> torch.Tensor:
        if self._P_fn is None:
            return self._Pcat
        if isinstance(self._P_fn, DiagonalModulation):
            if self._Pbuf is None:
                self._Pbuf = torch.empty(self.d, self.h * self.d, dtype=DTYPE, device=self.device)
            return self._P_fn.cat_columns(t, self._Pbuf)
        return self._cat_columns(self.P(t))

    def _tangent(self, y: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        """(I − y_i y_iᵀ W) G_i, in place on G (two passes: a batched dot, then one addcmul)."""
        if self.W is not None:
            return tangent(y, G, self.W)
        coef = torch.linalg.vecdot(y, G).unsqueeze(-1)  # y_iᵀ G_i
        return G.addcmul_(y, coef, value=-1.0)


_MASKS: dict[tuple[int, torch.device], torch.Tensor] = {}


def _upper_mask(n: int, device: torch.device) -> torch.Tensor:
    """(n, 1, n) boolean mask of j > i on ``device``, cached (broadcasts over the head axis)."""
    if (n, device) not in _MASKS:
        _MASKS[n, device] = torch.ones(n, n, dtype=torch.bool, device=device).triu(1).view(n, 1, n)
    return _MASKS[n, device]


def continuous_field(t: float, y: object, P: MatrixSpec, U: MatrixSpec | None = None, W: object | None = None, *,
                     causal: bool = False, normalization: str = "sqrt") -> torch.Tensor:
    """ẏ of model (6) at (t, y): a one-shot form of :class:`AttentionField`."""
    field = AttentionField(P, U, W, causal=causal, normalization=normalization)
    return field(float(t), as_tensor(y, "y"))


def discrete_step(y: torch.Tensor, P: object, U: object | None = None, W: object | None = None, *, tau: float = 1.0,
                  causal: bool = False, normalization: str = "softmax") -> torch.Tensor:
    """One layer of model (1)/(3): y_i⁺ = π_W(y_i + τ Σ_η Σ_j α^η_ij U_η y_j).

    With ``normalization="sqrt"`` this is eq. (1) of the consensus paper (D_ii = 1/(√d Σ_j…));
    the default "softmax" is the power-method paper's eq. (3) with U_η = W_η V_η and W = I.
    Differentiable (used for the autograd Jacobians).
    """
    y = as_tensor(y, "y")
    Pt = check_square_stack(P, "P", y.shape[-1])
    Ut = None if U is None else check_square_stack(U, "U", y.shape[-1])
    Wt = None if W is None else check_spd(W, y.shape[-1])
    tau = check_positive(tau, "tau")
    A = attention(y, Pt, causal=causal, normalization=normalization)  # (..., h, n, n)
    Ay = A @ y.unsqueeze(-3)  # (..., h, n, d)
    G = Ay.sum(-3) if Ut is None else (Ay @ Ut.transpose(-1, -2)).sum(-3)
    return residual_map(y, G, tau=tau, W=Wt)  # the one discrete map, shared with dynamics_step


def single_head_step(x: torch.Tensor, V: object, QK: object, *, tau: float = 1.0) -> torch.Tensor:
    """Map (8) on the unit sphere: x_i⁺ = N(x_i + τ Σ_j a_ij V x_j), a_ij = softmax_j(x_iᵀQᵀKx_j)."""
    x = as_tensor(x, "x")
    Vt = check_square_stack(V, "V", x.shape[-1])
    QKt = check_square_stack(QK, "QK", x.shape[-1])
    if Vt.shape[0] != 1 or QKt.shape[0] != 1:
        raise bad_argument("V/QK", "stacks of several heads", "one (d, d) matrix each (single head)")
    return discrete_step(x, QKt, Vt, tau=tau, normalization="softmax")


def oja_step(x: torch.Tensor, V: object, *, tau: float = 1.0) -> torch.Tensor:
    """Multiagent Oja map (9): uniform attention a_ij = 1/n, x_i⁺ = N(x_i + τ V x̄)."""
    x = as_tensor(x, "x")
    Vt = check_square_stack(V, "V", x.shape[-1])[0]
    tau = check_positive(tau, "tau")
    xbar = x.mean(dim=-2, keepdim=True)
    z = x + tau * (xbar @ Vt.T)
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True)


def iterate(step: Callable[[torch.Tensor], torch.Tensor], x0: object, steps: int, *,
            save_every: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply a map ``steps`` times; returns (k, states) with states[k] after k applications.

    Stops with NonFiniteStateError (reporting the step) if the state stops being finite.
    """
    if int(steps) != steps or steps < 0:
        raise bad_argument("steps", steps, "an integer ≥ 0")
    if int(save_every) != save_every or save_every < 1:
        raise bad_argument("save_every", save_every, "an integer ≥ 1")
    x = as_tensor(x0, "x0")
    ks, saved = [0], [x.clone()]
    with torch.no_grad(), threads_for(x.numel()):
        for k in range(1, int(steps) + 1):
            x = step(x)
            if not bool(torch.isfinite(x).all()):
                raise NonFiniteStateError(
                    f"the state became non-finite at step {k} (finite at step {k - 1})",
                    t=float(k - 1), partial=(torch.tensor(ks), torch.stack(saved)),
                )
            if k % save_every == 0 or k == steps:
                ks.append(k)
                saved.append(x.clone())
    return torch.tensor(ks), torch.stack(saved)
