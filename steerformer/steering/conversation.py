"""Talking with a (steered) causal LM: :class:`StrengthDial` scales a model's steering edits in
place, and :class:`Conversation` keeps a chat's turns and answers each new message through the
chat template, streaming the answer's text as it is generated. ``steerformer chat`` is the
terminal around them (``cli/chat.py``).

The dial never loads a second model. For every weight the chain edited it keeps the true
original ``W₀`` (``Steering.originals``) and the steered ``W₁`` it found, and sets

    W(s) = W₀ + s (W₁ − W₀)     (float64, cast to the stored dtype)

with s = 0 and s = 1 written as the stored bytes of ``W₀`` and ``W₁`` themselves, so strength 0 is
the base model bit for bit and strength 1 the saved steered model bit for bit. Every steering edit
steerformer makes is linear in its gain (``W + γ u aᵀ``, its bias change ``γ δ``), so for them
``W(s)`` is the edit at gain ``s γ``; for a norm-preserving ablation it is the interpolation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch

from ..errors import bad_argument
from .chain import steering_of
from .chat import check_answer_fits, has_chat_template, pad_id, stop_ids
from .measure import model_device


def check_strength(value: Any, name: str = "strength") -> float:
    """A finite real number (0: the base model, 1: the saved edit, 2: twice it, −1: away)."""
    try:
        s = float(value)
    except (TypeError, ValueError):
        s = math.nan
    if isinstance(value, bool) or not math.isfinite(s):
        raise bad_argument(name, value, "a finite number (0 = the base model, 1 = the saved edit, 0.5 = half of it)")
    return s


class StrengthDial:
    """The edits of a steered ``model`` scaled in place (module doc); :attr:`strength` starts at 1."""

    def __init__(self, model: Any) -> None:
        steering = steering_of(model)
        if steering is None:
            raise bad_argument("model", type(model).__name__, "a steered model (a folder written by `steer --out`, "
                               "or a model steered in this session)", "Steer it first, or chat without a strength.")
        self._params = {name: model.base_model.get_parameter(name) for name in steering.originals}
        self._original = {name: t for name, t in steering.originals.items()}
        self._steered = {name: p.detach().clone() for name, p in self._params.items()}
        self.strength = 1.0

    def set(self, strength: float) -> None:
        s = check_strength(strength)
        with torch.no_grad():
            for name, p in self._params.items():
                if s == 0.0:
                    p.copy_(self._original[name].to(p.device))
                elif s == 1.0:
                    p.copy_(self._steered[name])
                else:
                    w0 = self._original[name].to(p.device, torch.float64)
                    p.copy_((w0 + s * (self._steered[name].to(torch.float64) - w0)).to(p.dtype))
        self.strength = s

    @property
    def weights(self) -> list[str]:
        return list(self._params)


@dataclasses.dataclass
class Turn:
    user: str
    answer: str


class Conversation:
    """One chat's turns with ``model``: :meth:`answer` a message (streamed through ``on_text``),
    :meth:`undo` the last exchange. Greedy decoding (the same message in the same conversation
    gets the same answer), at most ``max_new_tokens`` tokens per answer."""

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 200, system: str | None = None) -> None:
        if tokenizer is None:
            raise bad_argument("model", getattr(model.config, "_name_or_path", type(model).__name__),
                               "a model with its tokenizer (chat turns text into tokens)", "Use a checkpoint folder "
                               "that holds its tokenizer files.")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise bad_argument("max_new_tokens", max_new_tokens, "a whole number >= 1")
        self.model, self.tokenizer, self.max_new_tokens, self.system = model, tokenizer, max_new_tokens, system
        self.turns: list[Turn] = []
        self.templated = has_chat_template(tokenizer)

    def prompt_ids(self, message: str) -> list[int]:
        """The token ids the model continues: the turns so far and ``message`` through the chat
        template with the generation prompt (without a template: ``message`` alone, as plain text)."""
        if not self.templated:
            return list(self.tokenizer(message)["input_ids"])
        messages = [{"role": "system", "content": self.system}] if self.system else []
        for t in self.turns:
            messages += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.answer}]
        messages.append({"role": "user", "content": message})
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    @torch.no_grad()
    def reply(self, message: str, on_text: Callable[[str], None] | None = None) -> str:
        """The model's answer to ``message`` after the turns so far (not added to them), its text
        handed to ``on_text`` piece by piece as tokens come."""
        from transformers.generation.streamers import BaseStreamer

        ids = self.prompt_ids(message)
        check_answer_fits(self.model, [ids], self.max_new_tokens)
        stops = stop_ids(self.model, self.tokenizer)
        tokenizer, prompt_len = self.tokenizer, len(ids)

        class Pieces(BaseStreamer):
            """transformers' TextStreamer's rule: show the decoded text up to its last complete
            word piece (a multi-byte character is shown once all its bytes are there)."""

            def __init__(self) -> None:
                self.tokens: list[int] = []
                self.shown = 0
                self.skip_prompt = True

            def put(self, value: torch.Tensor) -> None:
                if self.skip_prompt:  # the first call carries the prompt
                    self.skip_prompt = False
                    return
                self.tokens += [int(t) for t in value.reshape(-1).tolist() if int(t) not in stops]
                self.end(partial=True)

            def end(self, partial: bool = False) -> None:
                text = tokenizer.decode(self.tokens, skip_special_tokens=True)
                if partial and text.endswith("\ufffd"):  # a character still missing some of its bytes
                    return
                if on_text is not None and len(text) > self.shown:
                    on_text(text[self.shown:])
                self.shown = len(text)

        dev = model_device(self.model)
        streamer = Pieces()
        out = self.model.generate(torch.tensor([ids], device=dev), attention_mask=torch.ones(1, prompt_len,
                                  dtype=torch.long, device=dev), max_new_tokens=self.max_new_tokens,
                                  do_sample=False, temperature=None, top_p=None, top_k=None,
                                  pad_token_id=pad_id(tokenizer), eos_token_id=stops or None, streamer=streamer)
        new = out[0, prompt_len:].tolist()
        cut = next((i for i, t in enumerate(new) if t in stops), len(new))
        return tokenizer.decode(new[:cut], skip_special_tokens=True)

    def add(self, message: str, answer: str) -> None:
        self.turns.append(Turn(message, answer))

    def undo(self) -> Turn | None:
        """Forget the last exchange; None when there is none."""
        return self.turns.pop() if self.turns else None
