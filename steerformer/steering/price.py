"""The price of an edit on the real model: KL divergence of its output distributions.

* LM head (``*ForCausalLM`` / ``*LMHeadModel``): next-token distributions at every real position.
* Masked-LM head: every 4th real position (from the 2nd) is replaced by the mask token and the
  distributions at those positions are compared.
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


def _masked(model: Any, batch: PromptBatch) -> tuple[PromptBatch, torch.Tensor]:
    ids = batch.input_ids.clone()
    sel = torch.zeros_like(ids, dtype=torch.bool)
    sel[:, 1::4] = True
    sel &= batch.attention_mask.to(torch.bool)
    mask_id = getattr(model.config, "mask_token_id", None)
    if mask_id is None:
        mask_id = 4 if model.config.model_type == "albert" else 103  # BERT/ALBERT vocab convention
    ids[sel] = int(mask_id) % int(model.config.vocab_size)
    return PromptBatch(ids, batch.attention_mask), sel


def outputs(model: Any, batch: PromptBatch) -> Outputs:
    kind = head_kind(model)
    real = batch.attention_mask.to(torch.bool)
    with torch.no_grad():
        if kind == "bare":
            h = model(**batch.inputs(), output_hidden_states=False).last_hidden_state.to(torch.float64)
            E = model.get_input_embeddings().weight.to(torch.float64)
            logp = torch.log_softmax(h[real] @ E.T, -1) if E.shape[1] == h.shape[-1] else None
            return Outputs(logp, h[real], "embedding-readout" if logp is not None else None)
        if kind == "masked-lm":
            b, sel = _masked(model, batch)
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
