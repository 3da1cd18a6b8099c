"""Calibration of a generative model's edit by a KL budget (docs/math.md §5d): where (a layer scan),
along what (a concept's direction at each layer), how strong (the largest gain within the budget).

* The probe (:class:`ContinuationProbe`): calibration prompts (chat template when the tokenizer has
  one; held out from the evaluation's questions) and the base model's own greedy continuations, run
  once with every block's inputs cached. An edit at layer ℓ leaves the blocks before ℓ unchanged,
  so each trial re-runs only blocks ℓ… (``logprobs(start=ℓ)``) and compares the next-token
  distributions at the continuation positions with the base model's: the teacher-forced KL.
* The direction of a word or phrase at layer ℓ (:func:`concept_directions`, the *templated
  contrast*): the residual state after layer ℓ at the last token of carrier sentences ending in
  the phrase ("Today we are going to talk about ocean"), minus the same sentences ending in other
  nouns, averaged and normalized. The state is read where the edit writes, so a direction made at
  one layer is never used at another; the unembedding row of the token (the paper's direction)
  lives in the final layer's basis and, added in the middle of the network, moves nothing
  (docs/steering-chat.md).
* The gain (``algebra.search_gain``): γ = α·s_ℓ with s_ℓ the median residual norm after layer ℓ on the
  probe; α by secant steps on log KL against log α (KL ∝ α² for small α), never returning a gain
  whose measured KL exceeds the budget.
* The layer (``KLPlanner.scan`` in ``method.py``): each candidate calibrated to the budget, the one that puts the
  most probability on the concept's tokens (at the probe's continuation positions) wins.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from ....errors import bad_argument
from ....prompts import CARRIERS, OTHER_NOUNS, PROBE_QUESTIONS, REFERENCE_SENTENCES, PromptBatch, check_fits, words_of
from ...chat import chat_rows, generate_answers, has_chat_template, pad_id, word_forms
from ...probe import AnswerBatch, KLProbe, capture, model_device, no_cache


# ---- the probe -----------------------------------------------------------------------------------
@dataclasses.dataclass
class ContinuationProbe(KLProbe):
    """Calibration prompts + the base model's continuations, every block's inputs cached: a
    :class:`~steerformer.steering.probe.KLProbe` re-run from the edited layer."""

    first: torch.Tensor | None = None  # (P, n) bool: each row's first token
    texts: list[str] | None = None  # the prompts' texts (None: random ids)
    rows: list[list[int]] | None = None  # the prompts' ids
    continuations: list[list[int]] | None = None  # the base model's greedy continuations

    @classmethod
    @torch.no_grad()
    def of(cls, model: Any, adapter: Any, tokenizer: Any, prompts: Sequence[str] | None = None, *,
           n_new: int = 16) -> "ContinuationProbe":
        texts = None
        if tokenizer is not None and (prompts is not None or has_chat_template(tokenizer)):
            texts = list(PROBE_QUESTIONS[:6] if prompts is None else prompts)
            rows = chat_rows(tokenizer, texts, name="prompts")
        elif tokenizer is not None:
            texts = list(REFERENCE_SENTENCES[:6])
            rows = [list(r) for r in tokenizer(texts)["input_ids"]]
        else:  # no tokenizer: seeded random ids
            g = torch.Generator().manual_seed(0)
            rows = torch.randint(min(5, adapter.vocab_size - 1), adapter.vocab_size, (6, 12), generator=g).tolist()
        pad = 0 if tokenizer is None else pad_id(tokenizer)
        cont = _greedy(model, rows, n_new, pad, tokenizer)
        base = KLProbe.of(model, adapter, AnswerBatch.of(rows, cont, pad=pad, device=model_device(model)), cached=True)
        first = torch.zeros_like(base.select)
        first[:, 0] = True
        return cls(base.answers, base.base_logprobs, base.cache, first=first, texts=texts, rows=rows,
                   continuations=cont)

    @staticmethod
    def mass(logprobs: torch.Tensor, token_ids: Sequence[int]) -> float:
        """Mean probability of ``token_ids`` at the continuation positions."""
        return float(logprobs[:, list(token_ids)].exp().sum(-1).mean()) if token_ids else 0.0

    @torch.no_grad()
    def residual_scale(self, layer: int) -> float:
        """Median norm of the residual state after ``layer`` at real, non-first tokens (base model)."""
        states = self.cache.block_output(layer)
        keep = (self.batch.attention_mask.bool() & ~self.first).to(states.device)
        return float(states.to(torch.float64)[keep].norm(dim=-1).median())

    def writer_inputs(self, layer: int, module: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(z, first): the inputs of ``module`` in block ``layer`` at the real tokens (base model)."""
        z = self.cache.module_input(layer, module)
        mask = self.batch.attention_mask.bool()
        return z.to(torch.float64)[mask.to(z.device)].cpu(), self.first[mask].cpu()


def _greedy(model: Any, rows: list[list[int]], n_new: int, pad: int, tokenizer: Any) -> list[list[int]]:
    if tokenizer is not None:
        return generate_answers(model, tokenizer, rows, max_new_tokens=n_new)
    # no tokenizer: greedy continuation by hand (no end-of-sequence known, every row gets n_new)
    out = [list(r) for r in rows]
    with torch.no_grad():
        for _ in range(n_new):
            batch = PromptBatch.from_rows(out, pad_id=pad, left=True)
            logits = model(**batch.to(model_device(model)).inputs(), **no_cache(model)).logits[:, -1]
            for r, t in zip(out, logits.argmax(-1).tolist()):
                r.append(int(t))
    return [o[len(r):] for o, r in zip(out, rows)]


# ---- directions ----------------------------------------------------------------------------------
#: carrier sentences run through the model at once when a direction is read
CHUNK = 64


@torch.no_grad()
def concept_directions(model: Any, adapter: Any, tokenizer: Any, phrase: str, layers: Sequence[int],
                       name: str = "token") -> tuple[dict[int, torch.Tensor], dict]:
    """{layer: unit direction} of the templated contrast (module docstring) and what was used;
    ``name``: the argument the phrase came from (``token`` or ``text``), for its errors."""
    if tokenizer is None:
        raise bad_argument("token", phrase, "a model whose tokenizer is known", "Pass tokenizer=... .")
    word = " ".join(str(phrase).split())
    if not word:
        raise bad_argument("token", phrase, "a non-empty word or phrase")
    others = [o for o in OTHER_NOUNS if o != word.lower()]
    texts = [f"{c} {w}" for c in CARRIERS for w in [word, *others]]
    longest = max(len(r) for r in tokenizer([f"{c} {word}" for c in CARRIERS])["input_ids"])
    check_fits(longest, adapter.max_positions, name=name, value=words_of(word),
               what="a phrase, inside its carrier sentences,", fix="Shorten it to a few words: the direction is "
               "read at its last token.")
    if adapter.shares_weights:
        raise bad_argument("layer", max(layers), "a model whose blocks each run once (shared weights: ALBERT)")
    states: dict[int, list] = {k: [] for k in layers}
    for start in range(0, len(texts), CHUNK):  # in chunks: the states of 24 x 49 sentences need not sit at once
        batch = PromptBatch.from_texts(texts[start:start + CHUNK], tokenizer).to(model_device(model))
        outs = capture(model, adapter, batch, outputs=layers).outputs
        mask = batch.attention_mask.to(torch.float64).cpu()
        last = (mask * torch.arange(mask.shape[1], dtype=torch.float64)).argmax(1)
        for k in layers:
            states[k].append(outs[k].to("cpu", torch.float64)[torch.arange(len(last)), last])
    is_word = torch.tensor([i % (1 + len(others)) == 0 for i in range(len(texts))])
    dirs = {}
    for k in layers:
        h = torch.cat(states[k])
        diff = h[is_word].mean(0) - h[~is_word].mean(0)
        dirs[k] = diff / torch.linalg.vector_norm(diff)
    # how the phrase tokenizes after a carrier (for the record: a phrase is used whole)
    pieces = tokenizer.convert_ids_to_tokens(tokenizer(" " + word, add_special_tokens=False)["input_ids"])
    return dirs, {"phrase": word, "pieces": pieces, "read_at": "last token of the phrase" if len(pieces) > 1
                  else "the word's token", "carriers": len(CARRIERS), "other_nouns": len(others),
                  "method": "templated contrast"}


def concept_token_ids(tokenizer: Any, phrase: str) -> list[int]:
    """Single-token spellings of the phrase's first word's forms (with/without a leading space,
    lower/capitalized): the tokens whose probability the layer scan compares."""
    first = str(phrase).split()[0] if str(phrase).split() else str(phrase)
    pieces = [tokenizer(s, add_special_tokens=False)["input_ids"]
              for f in word_forms(first) for s in (f, " " + f, f.capitalize(), " " + f.capitalize())]
    return sorted({int(t[0]) for t in pieces if len(t) == 1})


def default_scan_layers(n_layers: int, count: int = 3) -> list[int]:
    """Middle layers: ``count`` evenly spaced in [0.4 L, 0.65 L] (SmolLM2: 12, 16, 19). Above that
    the scan's proxy misleads: at layer 22 the concept's tokens gain the most probability under
    teacher forcing, yet the answers mention the concept less (docs/steering-chat.md)."""
    lo, hi = round(0.4 * (n_layers - 1)), round(0.65 * (n_layers - 1))
    if hi <= lo:
        return sorted({max(0, n_layers // 2 - 1), n_layers // 2})[:count] or [0]
    step = (hi - lo) / max(count - 1, 1)
    return sorted({round(lo + i * step) for i in range(count)})


def addition_vectors(model: Any, tokenizer: Any, phrase: str, layers: Sequence[int], *,
                     probe: ContinuationProbe | None = None) -> dict[int, torch.Tensor]:
    """{layer: u_ℓ · s_ℓ}: the phrase's direction at each layer scaled to that layer's median
    residual norm on the probe, so that ``activation_steering(model, vectors, coeff=c)`` adds c
    residual norms (the coefficient means the same at every layer)."""
    from ....loading import open_source

    adapter = open_source(model).adapter
    probe = probe or ContinuationProbe.of(model, adapter, tokenizer)
    dirs, _ = concept_directions(model, adapter, tokenizer, phrase, layers)
    return {k: dirs[k] * probe.residual_scale(k) for k in layers}
