"""The addition's options (torch-free: ``steer --help`` builds its flags from them)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ....configs import (DEFAULT_JUDGED_MAX_KL, DEFAULT_MAX_KL, POSITIONS, MethodConfig, check_max_kl,
                         check_positions, option)
from ....errors import bad_argument

#: how the addition's layer scan chooses (docs/math.md §5d, "Selection and report")
LAYER_CHOICES = ("judged", "concept")
#: how the addition's gain is chosen (docs/math.md §5d, "Selection and report")
STRENGTH_CHOICES = ("judged", "kl")


@dataclasses.dataclass
class AdditionConfig(MethodConfig):
    """Activation addition written as weights after the layer(s), the gain the largest within a KL
    budget, or chosen by the judge within a KL ceiling (``steering/methods/addition/``)."""

    max_kl: float | None = option(None, "KL ceiling, nats/token, teacher-forced on the probe prompts' continuations "
                                         "(the addition method: causal LMs): --choose judged keeps the gain's KL "
                                         f"within it (default {DEFAULT_JUDGED_MAX_KL}); --choose kl takes the "
                                         f"largest gain within it (default {DEFAULT_MAX_KL}).", cli_type=float)
    # default "kl": on SmolLM2 the judged gain scored 0.22 mean aggregate on the report questions
    # against 0.33 for the KL rule (5 concepts; 8 selection questions are too few for the offline
    # judge: docs/steering-chat.md, "The gain chosen by the judge")
    choose: str = option("kl", "How the addition's gain is chosen: judged (the best mean aggregate of the judge "
                                   "on answers to the selection questions, KL <= --max-kl; the KL rule where the "
                                   "judge rates every gain 0, or without a chat template or the bundled MiniLM) | "
                                   "kl (the largest gain within --max-kl).", choices=STRENGTH_CHOICES)
    positions: str = option("skip-first", "KL-calibrated edit: where the addition acts (all | skip-first: not the "
                                          "first token).", choices=POSITIONS)
    # default "concept": on SmolLM2 the judged choice picked the same layer for 4 of 5 concepts, mean
    # good steers 0.212 vs 0.225, at 2-4x the calibration time (docs/steering-chat.md)
    layer_choice: str = option("concept", "KL-calibrated edit's layer scan: concept (the concept tokens' "
                                          "probability on the probe) | judged (the judge's mean aggregate on "
                                          "short answers to selection questions; concept when MiniLM is "
                                          "missing).", choices=LAYER_CHOICES)

    needs_head: ClassVar[str | None] = "causal-lm"

    @classmethod
    def check_call(cls, call: Any, options: dict) -> None:
        # the judged choice is a layer scan: a layer given (or a raw direction's one layer) leaves nothing to choose
        if options.get("layer_choice") == "judged" and getattr(call, "layer", None) is not None:
            raise bad_argument("layer_choice", "judged", f"no judged layer choice beside layer={call.layer} (the "
                               "judge chooses among scanned layers; a given layer is not scanned)",
                               "Drop layer_choice, or drop layer to have the layers scanned.")

    @property
    def budget(self) -> float:
        """The KL bound in force: ``max_kl`` when given, else the default of ``choose``."""
        if self.max_kl is not None:
            return float(self.max_kl)
        return DEFAULT_JUDGED_MAX_KL if self.choose == "judged" else DEFAULT_MAX_KL

    def check(self) -> None:
        if self.max_kl is not None:
            check_max_kl(self.max_kl)
        check_positions(self.positions)
        if self.choose not in STRENGTH_CHOICES:
            raise bad_argument("choose", self.choose, f"one of {STRENGTH_CHOICES}")
        if self.layer_choice not in LAYER_CHOICES:
            raise bad_argument("layer_choice", self.layer_choice, f"one of {LAYER_CHOICES}")
