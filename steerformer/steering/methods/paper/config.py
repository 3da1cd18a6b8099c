"""The paper edit's options (torch-free: ``steer --help`` builds its flags from them)."""

from __future__ import annotations

import dataclasses

from ....configs import SEED, MethodConfig, finite, option
from ....errors import bad_argument

SOLVES = ("exact", "min-norm")
MEASURES = ("dynamics", "model")

#: The paper edit's damage budget when its gain is searched (PaperConfig.min_state_cosine): the
#: final states keep a mean cosine >= this with the base model's. Chosen on the bundled MiniLM
#: (docs/math.md §5, docs/steering.md): at 0.9 its sentence search still works, below ~0.8 it does not.
DEFAULT_MIN_STATE_COSINE = 0.9


@dataclasses.dataclass
class PaperConfig(MethodConfig):
    """The papers' rank-1 edit of one attention layer's output matrix, W_O' = W_O + γ u (wᵀV⁺)
    (``steering/methods/paper/``)."""

    strength: float | None = option(None, "gain = strength x |lambda1(F_layer)|.", cli_type=float)
    gain: float | None = option(None, "Absolute gain (instead of --strength).", cli_type=float)
    target_alignment: float | None = option(None, "Choose the smallest gain reaching this alignment (the paper's "
                                                   "calibration; default 0.99 where no KL budget applies).",
                                            cli_type=float)
    measure: str = option("model", "Where the target is measured.", choices=MEASURES[::-1])
    solve: str = option("min-norm", "How wᵀV⁺ is obtained.", choices=SOLVES[::-1])
    through_ffn: bool = option(False, "Pre-compensate the FFN (align final states).")
    untie_last: bool = option(False, "ALBERT: give the last layer its own weights.")
    compensate_bias: bool = option(False, "Remove the edit's bias shift through b_O.")
    # None: the budget guards the default target (the call asked for no alignment) and steps aside
    # for a target_alignment the user gives, which the search then reaches as before
    min_state_cosine: float | None = option(None, "Damage budget of the gain search: the largest gain keeps the "
                                                  "final states' mean cosine with the base model's on the probe "
                                                  "sentences at least this (docs/steering.md); 0 = no budget. "
                                                  "Default: 0.9 unless --target-alignment is given.",
                                            cli_type=float)
    dynamics_n_prompts: int = option(30, "Random prompts of the controlled dynamics (measure='dynamics').", cli=False)
    dynamics_tokens: int = option(10, "Tokens per prompt of the controlled dynamics.", cli=False)
    seed: int = option(SEED, "Seed of the random tokens of the controlled dynamics.", cli=False)

    @property
    def target(self) -> float:
        """The alignment target of the paper's calibration (0.99 unless given)."""
        return 0.99 if self.target_alignment is None else float(self.target_alignment)

    @property
    def state_cosine_floor(self) -> float:
        """The damage budget in force: ``min_state_cosine`` when given, else
        :data:`DEFAULT_MIN_STATE_COSINE` for the default target and none for a given target."""
        if self.min_state_cosine is not None:
            return float(self.min_state_cosine)
        return DEFAULT_MIN_STATE_COSINE if self.target_alignment is None else 0.0

    def check(self) -> None:
        if self.solve not in SOLVES:
            raise bad_argument("solve", self.solve, f"one of {SOLVES}")
        if self.measure not in MEASURES:
            raise bad_argument("measure", self.measure, f"one of {MEASURES}")
        if self.strength is not None and self.gain is not None:
            raise bad_argument("gain", self.gain, "either strength= or gain=, not both")
        for name in ("strength", "gain"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not finite(v) or float(v) == 0):
                raise bad_argument(name, v, "a finite non-zero number (negative steers away from u)",
                                   "Milder steering is a value closer to 0.")
        m = self.min_state_cosine
        if m is not None and (self.strength is not None or self.gain is not None):
            given = "strength" if self.strength is not None else "gain"
            raise bad_argument("min_state_cosine", m, f"no damage budget beside {given}= (the budget bounds the gain "
                               f"search, and {given}= sets the gain: nothing is searched)",
                               f"Drop min_state_cosine, or drop {given} to have the gain searched.")
        if m is not None and (isinstance(m, bool) or not finite(m) or not 0 <= float(m) < 1):
            raise bad_argument("min_state_cosine", m, "a number in [0, 1): the mean cosine of the final states with "
                               "the base model's that the gain search keeps (0 = no budget)")
        if self.strength is None and self.gain is None and self.target_alignment is not None:
            t = self.target_alignment
            if isinstance(t, bool) or not finite(t) or not 0 < float(t) < 1:
                raise bad_argument("target_alignment", t, "a number in (0, 1): the mean |cos| wanted")
