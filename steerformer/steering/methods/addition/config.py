"""The addition's options (torch-free: ``steer --help`` builds its flags from them)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ....configs import DEFAULT_MAX_KL, POSITIONS, MethodConfig, check_max_kl, check_positions, option


@dataclasses.dataclass
class AdditionConfig(MethodConfig):
    """Activation addition written as weights after the layer(s), the gain the largest within a KL
    budget (``steering/methods/addition/``)."""

    max_kl: float | None = option(None, "KL budget, nats/token, teacher-forced on the probe prompts' continuations "
                                         "(the addition method: causal LMs): the largest gain within it "
                                         f"(default {DEFAULT_MAX_KL}).", cli_type=float)
    positions: str = option("skip-first", "KL-calibrated edit: where the addition acts (all | skip-first: not the "
                                          "first token).", choices=POSITIONS)

    needs_head: ClassVar[str | None] = "causal-lm"

    @property
    def budget(self) -> float:
        """The KL budget in force: ``max_kl`` when given, else the default."""
        return DEFAULT_MAX_KL if self.max_kl is None else float(self.max_kl)

    def check(self) -> None:
        if self.max_kl is not None:
            check_max_kl(self.max_kl)
        check_positions(self.positions)
