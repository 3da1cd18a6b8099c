"""The distilled method's options (:class:`DistilledConfig`), torch-free: the CLI and the docs read
them without loading the method. The method itself: ``distilled/__init__.py``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ....configs import Config, option
from ....errors import bad_argument

#: AxBench's prompt baseline (Wu et al. 2025), in the user turn: the teacher's instruction by default
AXBENCH_INSTRUCTION = ("{question} You must include content related to {concept} in your answer, while still "
                       "answering the question.")
#: what the unprompted model is trained to match: the teacher's next-token distributions over its own
#: answers (Prompt Baking's KL), the later layers' hidden states (PSR-style), or both
OBJECTIVES = ("kl", "states", "kl+states")
WRITERS = ("mlp", "attention")
#: the default edited layers as fractions of the model's depth (execution layers round(f·(n−1))):
#: measured on SmolLM2-135M (30 layers) in docs/steering-chat.md, "The distilled method"
DEFAULT_DEPTHS = (0.5, 0.65)


def default_layers(n_layers: int) -> tuple[int, ...]:
    """The edited layers of a model with ``n_layers`` blocks: :data:`DEFAULT_DEPTHS` of its depth,
    each layer once (a 2-layer model gets layer 1 only: (0.5, 0.65) x 1 rounds to 0 and 1)."""
    if n_layers < 1:
        raise bad_argument("layers", n_layers, "a model with at least one block")
    return tuple(sorted({min(n_layers - 1, max(0, round(f * (n_layers - 1)))) for f in DEFAULT_DEPTHS}))


def _positive_number(name: str, v: Any, *, zero: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise bad_argument(name, v, "a finite number >= 0" if zero else "a finite number > 0")


@dataclasses.dataclass
class DistilledConfig(Config):
    """Options of the distilled edit (docs/steering-chat.md, "The distilled method")."""

    concept: str = option("", "The concept to steer toward (default: the call's token/text).")
    instruction: str = option(AXBENCH_INSTRUCTION, "The teacher's user turn: {question} (required) and {concept}; "
                                                   "default AxBench's prompt baseline.")
    questions: str | None = option(None, "A text file of your own questions, one per line, for the teacher to "
                                         "answer (default: the built-in TRAIN questions).", cli_type=str)
    layers: tuple = option((), "Execution layers whose writer gets a low-rank edit (default: "
                               f"{', '.join(f'{f:g}' for f in DEFAULT_DEPTHS)} of the model's depth).", cli_type=str)
    writer: str = option("mlp", "The residual writer edited in each layer.", choices=WRITERS)
    rank: int = option(4, "Rank of each layer's edit.")
    objective: str = option("kl", "What the unprompted model matches: the teacher's next-token distributions (kl, "
                                  "Prompt Baking), the later layers' hidden states (states, PSR), or both.",
                            choices=OBJECTIVES)
    steps: int = option(20, "Optimizer steps.")
    lr: float = option(0.01, "Adam learning rate.")
    batch_size: int = option(8, "Teacher answers per step.")
    kl_weight: float = option(1.0, "Weight of KL(base || edited) on neutral text (the base model's own answers).")
    max_answer_tokens: int = option(32, "Tokens of each teacher answer (greedy) trained on.")
    gains: tuple = option((1.5, 2.0, 3.0), "Strengths tried on the selection questions (x the learned edit).",
                          cli_type=str)
    kl_ceiling: float = option(0.6, "The strength chosen is the best judged one whose KL on the selection answers "
                                    "stays within this (nats/token).")
    select_judge: str = option("offline", "Who rates the selection answers: offline (the project's judge), an "
                                          "OpenAI-compatible URL, or none (the concept rate decides).")
    seed: int = option(0, "Seed of the initialization and the batches.")

    def __post_init__(self) -> None:
        self.check_types()
        if not isinstance(self.concept, str):
            raise bad_argument("concept", self.concept, "a word or phrase")
        if not isinstance(self.instruction, str) or "{question}" not in self.instruction:
            raise bad_argument("instruction", self.instruction, "a text holding {question} (and usually {concept})",
                               f"The default is AxBench's: {AXBENCH_INSTRUCTION!r}.")
        try:
            self.instruction.format(question="q", concept="c")
        except (KeyError, IndexError, ValueError) as e:
            raise bad_argument("instruction", self.instruction, "a text whose only {fields} are {question} and "
                               "{concept}", f"Write literal braces as {{{{ }}}} ({e}).") from None
        for name in ("rank", "steps", "batch_size", "max_answer_tokens"):
            if getattr(self, name) < 1:
                raise bad_argument(name, getattr(self, name), "a positive whole number")
        _positive_number("lr", self.lr)
        _positive_number("kl_ceiling", self.kl_ceiling)
        _positive_number("kl_weight", self.kl_weight, zero=True)
        if self.objective not in OBJECTIVES:
            raise bad_argument("objective", self.objective, f"one of {', '.join(OBJECTIVES)}")
        if self.writer not in WRITERS:
            raise bad_argument("writer", self.writer, f"one of {', '.join(WRITERS)}")
        if not isinstance(self.select_judge, str) or not self.select_judge.strip():
            raise bad_argument("select_judge", self.select_judge, "offline, none, or a judge server's http(s) URL")
        self.layers = _numbers("layers", self.layers, int)
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in self.layers):
            raise bad_argument("layers", self.layers, "execution layers as whole numbers, e.g. (15, 19)")
        self.gains = _numbers("gains", self.gains, float)
        if not self.gains or not all(isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g)
                                     and g > 0 for g in self.gains):
            raise bad_argument("gains", self.gains, "at least one positive number, e.g. (0.5, 1.0, 2.0)")


def _numbers(name: str, value: Any, kind: type) -> tuple:
    """A tuple from a tuple/list, one number, or the CLI's comma list ("15,19")."""
    if isinstance(value, str):
        try:
            return tuple(kind(x) for x in value.replace(" ", "").split(",") if x)
        except ValueError:
            raise bad_argument(name, value, f"a comma list of {'whole numbers' if kind is int else 'numbers'}") from None
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


__all__ = ["AXBENCH_INSTRUCTION", "DEFAULT_DEPTHS", "OBJECTIVES", "WRITERS", "DistilledConfig", "default_layers"]
