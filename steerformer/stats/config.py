"""What the power-method experiment runs: one dataclass shared by `analyze`,
`power_method_stats` and the CLI, so the options are declared (and checked) once."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import bad_argument


def _opt(default: Any, help: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class StatsConfig:
    """Options of the power-method statistics (MATH.md §3–4)."""

    n_prompts: int = _opt(100, "random prompts of the controlled dynamics")
    n_tokens: int = _opt(10, "tokens per random prompt")
    tokens: Any = _opt(None, "user-given initial tokens (prompts, tokens, d) instead of random ones")
    seed: int = _opt(0, "seed of the random initial tokens")
    normalize_initial: bool = _opt(True, "put the initial tokens (random or given) on the unit sphere; False "
                                         "runs them raw (Appendix B says only 'drawn from a normal distribution')")
    tau: float = _opt(1.0, "step size τ of the dynamics x + τ F A x (the paper: 1)")
    layer_norm: bool | None = _opt(None, "apply the model's own pre-attention norm (LayerNorm or RMSNorm: ln_1, input_layernorm) before attention: "
                                         "True / False for one run; None (default) runs both for pre-LN models — "
                                         "eq. (1) without it as 'controlled', with it as 'controlled_layer_norm' — "
                                         "and without it for the others")
    null_draws: int = _opt(5, "random draws of the null model (MATH.md §4b: Gaussian W_Q, W_K, W_V, W_O with each "
                              "matrix's std, seeds 0..K-1); 0 = off")
    bias: bool = _opt(False, "keep the value/output biases in the dynamics")
    prolong: int | None = _opt(None, "prolonged run: apply the layers K times (default 10 for shared-weight "
                                     "models such as ALBERT, none otherwise)")
    full_model: bool = _opt(True, "also run the full-model variant (the model's own hidden states)")
    prompts: Sequence[str] | str | Path | None = _opt(None, "prompts of the full-model variant: a list, a text "
                                                            "file (one per line), or None for built-in sentences")
    cumulative: bool = _opt(True, "compute the cumulative-product statistic (Fig. 8)")

    def __post_init__(self) -> None:
        for name in ("n_prompts", "n_tokens"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v >= 1):
                raise bad_argument(name, v, "a positive integer")
        if self.prolong is not None and not (isinstance(self.prolong, (int, np.integer)) and self.prolong >= 1):
            raise bad_argument("prolong", self.prolong,
                               "an integer K >= 1 (the prolonged run applies the layers K times)")
        if isinstance(self.null_draws, bool) or not (isinstance(self.null_draws, (int, np.integer)) and self.null_draws >= 0):
            raise bad_argument("null_draws", self.null_draws, "an integer K >= 0 (0 turns the null model off)")
        if self.layer_norm is not None and not isinstance(self.layer_norm, (bool, np.bool_)):
            raise bad_argument("layer_norm", self.layer_norm, "True, False or None (both, for pre-LN models)")
        if not np.isfinite(self.tau):
            raise bad_argument("tau", self.tau, "a finite step size")
