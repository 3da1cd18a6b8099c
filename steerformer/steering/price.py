"""The price of an edit on the real model: KL divergence of its output distributions.

* LM head (``*ForCausalLM`` / ``*LMHeadModel``): next-token distributions at every real position.
* Masked-LM head: every 4th real position (from the 2nd) is replaced by the tokenizer's mask
  token and the distributions at those positions are compared (no mask token known: no KL).
* Bare model without head (``BertModel``, MiniLM, ``GPT2Model``): there is no output distribution,
  so steerformer uses the *embedding readout* softmax(h Eᵀ) with E the input embedding matrix —
  the tied-unembedding / logit-lens view of the final states (``kl_kind="embedding-readout"``).
  When the embedding width differs from the hidden width (ALBERT) no KL is reported (None).
Every case also reports the mean cosine between the original and the steered final states.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .prompts import PromptBatch


@dataclasses.dataclass
class Outputs:
    """What the price compares: log-probabilities at the compared positions and final states."""

    logp: torch.Tensor | None  # (N, vocab) float64
    states: torch.Tensor  # (N, d) float64 final hidden states at real tokens
    kind: str | None


def head_kind(model: Any) -> str:
    """"causal-lm", "masked-lm" or "bare"."""
    if getattr(model, "base_model", model) is model or model.get_output_embeddings() is None:
        return "bare"
    name = type(model).__name__
    return "masked-lm" if "MaskedLM" in name or "ForPreTraining" in name else "causal-lm"


def mask_token_id(model: Any, tokenizer: Any = None) -> int | None:
    """The real mask token id: the tokenizer's, else the config's; None when neither knows one
    (no guessing: 103 is BERT's [MASK] but an ordinary token in RoBERTa's vocabulary)."""
    for v in (getattr(tokenizer, "mask_token_id", None), getattr(model.config, "mask_token_id", None)):
        if v is not None and 0 <= int(v) < int(model.config.vocab_size):
            return int(v)
    return None


def _masked(batch: PromptBatch, mask_id: int) -> tuple[PromptBatch, torch.Tensor]:
    ids = batch.input_ids.clone()
    sel = torch.zeros_like(ids, dtype=torch.bool)
    sel[:, 1::4] = True
    sel &= batch.attention_mask.to(torch.bool)
    ids[sel] = int(mask_id)
    return PromptBatch(ids, batch.attention_mask), sel


def outputs(model: Any, batch: PromptBatch, tokenizer: Any = None) -> Outputs:
    kind = head_kind(model)
    real = batch.attention_mask.to(torch.bool)
    with torch.no_grad():
        if kind == "bare":
            h = model(**batch.inputs(), output_hidden_states=False).last_hidden_state.to(torch.float64)
            E = model.get_input_embeddings().weight.to(torch.float64)
            logp = torch.log_softmax(h[real] @ E.T, -1) if E.shape[1] == h.shape[-1] else None
            return Outputs(logp, h[real], "embedding-readout" if logp is not None else None)
        mask_id = mask_token_id(model, tokenizer) if kind == "masked-lm" else None
        if kind == "masked-lm" and mask_id is None:
            out = model(**batch.inputs(), output_hidden_states=True)
            return Outputs(None, out.hidden_states[-1][real].to(torch.float64), None)
        if kind == "masked-lm":
            b, sel = _masked(batch, mask_id)
            out = model(**b.inputs(), output_hidden_states=True)
            return Outputs(torch.log_softmax(out.logits[sel].to(torch.float64), -1),
                           out.hidden_states[-1][real].to(torch.float64), "masked-token")
        out = model(**batch.inputs(), output_hidden_states=True, use_cache=False)
        return Outputs(torch.log_softmax(out.logits[real].to(torch.float64), -1),
                       out.hidden_states[-1][real].to(torch.float64), "next-token")


def price(before: Outputs, after: Outputs) -> dict:
    """{"kl": mean KL(p_before ‖ p_after) in nats, "kl_kind", "state_cosine"}."""
    kl = None
    if before.logp is not None and after.logp is not None:
        kl = float((before.logp.exp() * (before.logp - after.logp)).sum(-1).mean())
    cos = torch.nn.functional.cosine_similarity(before.states, after.states, dim=-1).mean()
    return {"kl": kl, "kl_kind": before.kind, "state_cosine": float(cos)}
