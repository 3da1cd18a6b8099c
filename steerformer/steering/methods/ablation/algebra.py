"""The ablation's algebra (docs/math.md §5b, §5e), on plain tensors: orthonormal directions from k
given ones, and W' = (I − s UUᵀ) W with its norm-preserving variants."""

from __future__ import annotations

import dataclasses

import torch

from ...algebra import delta_output

#: directions whose smallest singular value (rows normalized) is below this share of the largest
#: are linearly dependent: refused, not silently orthonormalized into noise
DEPENDENT_TOL = 1e-6
#: the norm-preserving variants: "rows" keeps ‖W_i,:‖ (Heretic's default "full" row normalization:
#: each residual coordinate's incoming weights), "columns" keeps ‖W_:,j‖ (each output vector)
NORM_PRESERVING = ("rows", "columns")


def orthonormal_directions(D: torch.Tensor, *, tol: float = DEPENDENT_TOL, name: str = "direction") -> torch.Tensor:
    """U (d, k) with orthonormal columns spanning the rows of ``D`` (k, d), float64: the rows
    normalized, then Q of their QR with column i signed like row i (so U's first column is the
    first direction). One row is returned as it is normalized, with no QR (the same bytes as a
    single direction has always had). Linearly dependent rows are refused."""
    from ....errors import bad_argument

    D = D.to(torch.float64)
    D = D.reshape(1, -1) if D.ndim == 1 else D
    norms = torch.linalg.vector_norm(D, dim=1, keepdim=True)
    if D.shape[0] == 1:  # a unit vector (to rounding) is kept as it is: the same bytes, the same edit
        return D[0] if abs(float(norms) - 1.0) <= 1e-15 else D[0] / norms[0]
    rows = D / norms
    sv = torch.linalg.svdvals(rows)
    if not float(sv[-1]) > tol * float(sv[0]):
        raise bad_argument(name, f"{rows.shape[0]} vectors with singular values {float(sv[0]):.3g} .. {float(sv[-1]):.3g}",
                           f"linearly independent directions (smallest / largest singular value "
                           f"{float(sv[-1] / sv[0]):.2g} <= {tol:g}: one is a combination of the others)",
                           "Drop the dependent directions (or orthonormalize them yourself).")
    Q, R = torch.linalg.qr(rows.T)
    return Q * torch.sign(torch.diagonal(R))[None, :]


@dataclasses.dataclass
class Ablation:
    """W' = diag(r) W diag(c) + γ u a (and b' = b + δ): the factors of one writer's ablation, and the
    residue ‖UᵀW'‖_F / ‖UᵀW‖_F of what is left along U (1 − s for the plain projection)."""

    u: torch.Tensor  # (out,) or (out, k)
    a: torch.Tensor  # (in,) or (k, in)
    gain: float  # −s
    row_scale: torch.Tensor | None
    col_scale: torch.Tensor | None
    bias_delta: torch.Tensor | None
    residue: float

    def weight(self, W: torch.Tensor) -> torch.Tensor:
        """W' for the W these factors were made from (float64; for reports and tests)."""
        out = W.to(torch.float64)
        if self.row_scale is not None:
            out = out * self.row_scale[:, None]
        if self.col_scale is not None:
            out = out * self.col_scale[None, :]
        return out + delta_output(self.u, self.a, self.gain)


def _rows(U: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """UᵀM row by row (a = u @ M for one direction: the vector-matrix product ablation always used)."""
    return U @ M if U.ndim == 1 else torch.stack([U[:, i] @ M for i in range(U.shape[1])])


def _safe_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den, 0 where den = 0 (a row or column that is zero stays zero)."""
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))


def ablation(W: torch.Tensor, U: torch.Tensor, s: float, *, norm_preserving: str | None = None,
             b: torch.Tensor | None = None) -> Ablation:
    """The ablation of the directions U (orthonormal columns (d, k), or one unit vector (d,)) from
    W (d, in), float64, with P = UUᵀ (docs/math.md §5e):

    * plain: W' = (I − sP) W = W + (−s) U (UᵀW): rank k, exactly a LoRA (B = −sU, A = UᵀW);
    * ``norm_preserving="rows"`` (Heretic's "full" row normalization, read from its ``abliterate``):
      N = diag(‖W_i,:‖), Ŵ = N⁻¹W, R = (I − sP) Ŵ, W'_i,: = ‖W_i,:‖ R_i,: / ‖R_i,:‖ — each residual
      coordinate keeps the norm of its incoming weights; W' = diag(c/n) W + (−s)(diag(c) U)(UᵀŴ)
      with c_i = n_i / ‖R_i,:‖. Not low-rank, and no longer orthogonal to U (the residue);
    * ``norm_preserving="columns"``: R = (I − sP) W, W'_:,j = ‖W_:,j‖ R_:,j / ‖R_:,j‖ — each output
      vector keeps its norm; W' = W diag(c) + (−s) U (UᵀW diag(c)). Columns stay orthogonal to U
      at s = 1 (residue 0), as in the plain projection.

    ``b``: the bias, projected b' = (I − sP) b in every variant (a constant write has no norm to keep)."""
    W = W.to(torch.float64).contiguous()
    U = U.to(torch.float64)
    s = float(s)
    row = col = None
    if norm_preserving is None:
        u, a = U, _rows(U, W)
    elif norm_preserving == "rows":
        n = torch.linalg.vector_norm(W, dim=1)
        What = W * _safe_ratio(torch.ones_like(n), n)[:, None]
        A = _rows(U, What)
        R = What + delta_output(U, A, -s)
        c = _safe_ratio(n, torch.linalg.vector_norm(R, dim=1))
        row = _safe_ratio(c, n)
        u, a = (c * U if U.ndim == 1 else c[:, None] * U), A
    elif norm_preserving == "columns":
        m = torch.linalg.vector_norm(W, dim=0)
        A = _rows(U, W)
        R = W + delta_output(U, A, -s)
        col = _safe_ratio(m, torch.linalg.vector_norm(R, dim=0))
        u, a = U, A * col
    else:
        raise ValueError(f"norm_preserving={norm_preserving!r}: expected None or one of {NORM_PRESERVING}")
    out = Ablation(u=u, a=a, gain=-s, row_scale=row, col_scale=col, bias_delta=None, residue=0.0)
    if b is not None:
        b = b.to(torch.float64)
        out.bias_delta = -s * (U * (U @ b) if U.ndim == 1 else U @ (U.T @ b))
    before = float(torch.linalg.norm(_rows(U, W)))
    out.residue = float(torch.linalg.norm(_rows(U, out.weight(W)))) / before if before > 0 else 0.0
    return out


__all__ = ["Ablation", "DEPENDENT_TOL", "NORM_PRESERVING", "ablation", "orthonormal_directions"]
