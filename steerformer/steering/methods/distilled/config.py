"""The distilled method's options (:class:`DistilledConfig`), torch-free: ``steer --help`` builds its
flags from them without loading the method (an option of this method chooses it). The method:
``distilled/__init__.py``. The concept is the call's ``token``/``text`` (``--token``), the layers
the call's ``layers``/``layer`` (``--layers``/``--layer``; default :func:`default_layers`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ....configs import MethodConfig, option
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
class DistilledConfig(MethodConfig):
    """Options of the distilled edit (docs/steering-chat.md, "The distilled method")."""

    instruction: str = option(AXBENCH_INSTRUCTION, "The distilled edit: the teacher's user turn: {question} (required) and {concept}; "
                                                   "default AxBench's prompt baseline.")
    questions: str | None = option(None, "The distilled edit: a text file of your own questions, one per line, for the teacher to "
                                         "answer (default: the built-in TRAIN questions).", cli_type=str)
    writer: str = option("mlp", "The distilled edit: the residual writer edited in each layer (--layers; default: "
                                f"{' and '.join(f'{f:g}' for f in DEFAULT_DEPTHS)} of the model's depth).",
                         choices=WRITERS)
    rank: int = option(4, "The distilled edit: rank of each layer's edit.")
    objective: str = option("kl", "The distilled edit: what the unprompted model matches: the teacher's next-token distributions (kl, "
                                  "Prompt Baking), the later layers' hidden states (states, PSR), or both.",
                            choices=OBJECTIVES)
    steps: int = option(20, "The distilled edit: optimizer steps.")
    lr: float = option(0.01, "The distilled edit: Adam learning rate.")
    batch_size: int = option(8, "The distilled edit: teacher answers per step.")
    kl_weight: float = option(1.0, "The distilled edit: weight of KL(base || edited) on neutral text (the base model's own answers).")
    max_answer_tokens: int = option(32, "The distilled edit: tokens of each teacher answer (greedy) trained on.")
    # a comma list (the CLI's form, so that the flag at its default is "not given")
    gains: tuple = option("1.5,2,3", "The distilled edit: strengths tried on the selection questions (x the learned ΔW).",
                          cli_type=str)
    kl_ceiling: float = option(0.6, "The distilled edit: the strength chosen is the best judged one whose KL on the selection answers "
                                    "stays within this (nats/token).")
    select_judge: str = option("offline", "The distilled edit: who rates the selection answers: offline (the project's judge), an "
                                          "OpenAI-compatible URL, or none (the concept rate decides).")
    train_seed: int = option(0, "The distilled edit: seed of the initialization and the batches.")

    def check(self) -> None:
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
        self.gains = _numbers("gains", self.gains, float)
        if not self.gains or not all(isinstance(g, (int, float)) and not isinstance(g, bool) and math.isfinite(g)
                                     and g > 0 for g in self.gains):
            raise bad_argument("gains", self.gains, "at least one positive number, e.g. (0.5, 1.0, 2.0)")


def _numbers(name: str, value: Any, kind: type) -> tuple:
    """A tuple from a tuple/list, one number, or the CLI's comma list ("1.5,2,3", also shown as "(1.5, 2, 3)")."""
    if isinstance(value, str):
        try:
            return tuple(kind(x) for x in value.strip("()[] ").replace(" ", "").split(",") if x)
        except ValueError:
            raise bad_argument(name, value, f"a comma list of {'whole numbers' if kind is int else 'numbers'}") from None
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


__all__ = ["AXBENCH_INSTRUCTION", "DEFAULT_DEPTHS", "OBJECTIVES", "WRITERS", "DistilledConfig", "default_layers"]
