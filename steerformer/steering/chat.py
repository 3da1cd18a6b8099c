"""What steering's calibration and its evaluation both need from a chat model: a word's simple
forms, chat templating, padding and end-of-answer tokens, and greedy or sampled generation. Below
both (``calibrate.py`` and ``evaluate.py`` import it; it imports neither); the prompt sets are in
``steerformer/prompts.py``."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..errors import bad_argument
from ..prompts import PromptBatch
from .measure import max_positions, model_device


def word_forms(word: str) -> list[str]:
    """``word`` and its simple forms (plural -s/-es/-ies, or the singular of a plural), lower case.
    A phrase is kept whole (its last word gets the forms)."""
    w = " ".join(str(word).split()).lower()
    if not w:
        raise bad_argument("concept", word, "a non-empty word or phrase")
    head, _, last = w.rpartition(" ")
    forms = {last}
    if last.endswith("ies"):
        forms.add(last[:-3] + "y")
    elif last.endswith(("ses", "xes", "zes", "ches", "shes")):
        forms.add(last[:-2])
    elif last.endswith("s") and not last.endswith("ss"):
        forms.add(last[:-1])
    elif last.endswith("y") and last[-2:-1] not in "aeiou":
        forms.add(last[:-1] + "ies")
    else:
        forms.add(last + ("es" if last.endswith(("s", "x", "z", "ch", "sh")) else "s"))
    return sorted(f"{head} {f}" if head else f for f in forms)


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_rows(tokenizer: Any, questions: Sequence[str], *, chat: bool | None = None,
              name: str = "questions") -> list[list[int]]:
    """Token ids of each question: a user turn through the chat template with the generation prompt
    (``chat=None``: when the tokenizer has a template), else the plain text."""
    if tokenizer is None:
        raise bad_argument("tokenizer", None, "the model's tokenizer (answers are generated from text prompts)",
                           "Pass tokenizer=... .")
    questions = [str(q) for q in questions]
    if not questions:
        raise bad_argument(name, questions, "at least one prompt")
    use_chat = has_chat_template(tokenizer) if chat is None else bool(chat)
    if use_chat and not has_chat_template(tokenizer):
        raise bad_argument("chat", True, f"a tokenizer with a chat template ({type(tokenizer).__name__} has none)",
                           "Pass chat=False (--no-chat) to use the prompts as plain text.")
    if not use_chat:
        return [list(r) for r in tokenizer(questions)["input_ids"]]
    rows = []
    for q in questions:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        rows.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return rows


def pad_id(tokenizer: Any) -> int:
    ids = (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None))
    return next((int(v) for v in ids if v is not None), 0)


def stop_ids(model: Any, tokenizer: Any) -> list[int]:
    """Tokens that end an answer: the generation config's and the tokenizer's end-of-sequence ids."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = list(ids) if isinstance(ids, (list, tuple)) else ([] if ids is None else [ids])
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.append(tokenizer.eos_token_id)
    return sorted({int(i) for i in ids})


@torch.no_grad()
def check_answer_fits(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    """The longest prompt plus ``max_new_tokens`` must fit in the positions the model embeds: past them
    a learned position table is indexed out of range (a CUDA assert or an IndexError deep in the
    forward), and a rotary model answers from positions it was never trained on."""
    limit = max_positions(model)  # None without an adapter: generation itself is the only judge
    longest = max((len(p) for p in prompts), default=0)
    if limit is not None and longest + int(max_new_tokens) > limit:
        raise bad_argument("max_new_tokens", int(max_new_tokens),
                           f"at most {max(limit - longest, 0)}: the longest prompt has {longest} tokens and "
                           f"the model embeds {limit} positions (prompt + answer must fit)",
                           f"Use --max-new-tokens {max(limit - longest, 0)} or less, or shorter questions."
                           if limit > longest else "Use shorter questions.")


def generate_answers(model: Any, tokenizer: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 40,
                     sample: bool = False, seed: int = 0, batch_size: int = 16, temperature: float = 0.7,
                     top_p: float = 0.9) -> list[list[int]]:
    """The answer ids of each prompt (left-padded batches; cut at the first end-of-sequence token).
    ``sample``: nucleus sampling seeded per batch (same seed, same answers)."""
    check_answer_fits(model, prompts, max_new_tokens)
    stops = stop_ids(model, tokenizer)
    pad = pad_id(tokenizer)
    out: list[list[int]] = []
    dev = model_device(model)
    for start in range(0, len(prompts), batch_size):
        batch = PromptBatch.from_rows(prompts[start:start + batch_size], pad_id=pad, left=True).to(dev)
        kw: dict = {"max_new_tokens": int(max_new_tokens), "pad_token_id": pad, "eos_token_id": stops or None}
        if sample:
            torch.manual_seed(int(seed) + start)
            kw.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        ids = model.generate(**batch.inputs(), **kw)[:, batch.input_ids.shape[1]:].tolist()
        for row in ids:  # cut at the first end-of-sequence token
            out.append(row[:next((i for i, t in enumerate(row) if t in stops), len(row))])
    return out
