"""What every steering method measures on the real model: the held-out prompts (``encode``), the
final states re-run from the edited layer on (``ModelProbe``, through the probe room), their
alignment with a direction, and the price of an edit — the KL divergence of the model's output
distributions before and after it (``outputs``, ``price``) and the mean cosine of the final states.
:class:`HeldOut` takes these before the edit and compares after it; ``default_measure`` is a
method's default measurement. (The paper's own probes — its controlled dynamics, FFN
pre-compensation, the predicted side of u — are in ``methods/paper/probes.py``.)

Price, by the model's head:

* LM head (``*ForCausalLM`` / ``*LMHeadModel``): next-token distributions at every real position.
* Masked-LM head: every 4th real position (from the 2nd) is replaced by the tokenizer's mask
  token and the distributions at those positions are compared (no mask token known: no KL).
* Bare model without head (``BertModel``, MiniLM, ``GPT2Model``): there is no output distribution,
  so steerformer uses the *embedding readout* softmax(h Eᵀ) with E the input embedding matrix —
  the tied-unembedding / logit-lens view of the final states (``kl_kind="embedding-readout"``).
  When the embedding width differs from the hidden width (ALBERT) no KL is reported (None).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from ..adapters.base import Adapter
from ..errors import SteerformerError, bad_argument
from ..prompts import HELDOUT_SENTENCES, REFERENCE_SENTENCES, PromptBatch, check_fits, words_of
from .common import non_finite
from .probe import BlockCache, capture, kl_per_token, model_device


# ---- prompts -------------------------------------------------------------------------------------
def encode(model: Any, prompts: Sequence[str] | torch.Tensor | None, tokenizer: Any, *, held_out: bool = False,
           n_random: int = 8, n_tokens: int = 12, name: str = "prompts") -> PromptBatch:
    """Prompts as model inputs, on the model's device: strings through the tokenizer, a (P, n) id
    tensor as is, or the defaults (sentences with a tokenizer, seeded random ids without)."""
    if isinstance(prompts, torch.Tensor):
        if prompts.ndim != 2 or prompts.dtype not in (torch.int64, torch.int32):
            raise bad_argument(name, f"tensor {tuple(prompts.shape)} {prompts.dtype}", "a (prompts, tokens) integer tensor of token ids")
        vocab = int(model.config.vocab_size)
        if prompts.numel() == 0 or int(prompts.min()) < 0 or int(prompts.max()) >= vocab:
            shown = "empty" if prompts.numel() == 0 else f"ids in [{int(prompts.min())}, {int(prompts.max())}]"
            raise bad_argument(name, f"tensor {tuple(prompts.shape)} with {shown}",
                               f"a non-empty tensor of token ids in [0, {vocab - 1}] (vocab_size={vocab})")
        return PromptBatch(prompts.long(), torch.ones_like(prompts, dtype=torch.long)).to(model_device(model))
    if prompts is None and tokenizer is None:
        vocab = int(model.config.vocab_size)
        g = torch.Generator().manual_seed(1 if held_out else 0)
        ids = torch.randint(min(5, vocab - 1), vocab, (n_random, n_tokens), generator=g)
        return PromptBatch(ids, torch.ones_like(ids)).to(model_device(model))
    prompts = (HELDOUT_SENTENCES if held_out else REFERENCE_SENTENCES) if prompts is None else prompts
    if tokenizer is None:
        raise bad_argument(name, list(prompts)[:2], "token ids (a tensor) when no tokenizer is known",
                           "Pass tokenizer=... or a (prompts, tokens) id tensor.")
    prompts = [str(p) for p in prompts]
    if not prompts:
        raise bad_argument(name, prompts, "at least one prompt")
    batch = PromptBatch.from_texts(prompts, tokenizer)  # never sets tokenizer.pad_token
    check_fits(batch.input_ids.shape[1], max_positions(model), name=name, value=f"a prompt of {words_of(prompts)}",
               what="prompts", fix="Shorten the longest prompt.")
    return batch.to(model_device(model))


def max_positions(model: Any) -> int | None:
    """The positions ``model`` embeds (its adapter's declaration); None when unknown."""
    from ..adapters import get_adapter

    try:
        return get_adapter(model.config).max_positions
    except (SteerformerError, AttributeError):
        return None


def mean_abs_cos(x: torch.Tensor, u: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """mean over tokens of ρ(x, u) = |⟨x, u⟩| / (‖x‖‖u‖) (docs/math.md §4); ``mask`` selects tokens. For
    k orthonormal directions u (k, d): ρ = ‖U x‖ / ‖x‖, the share of x in their span."""
    x = x.to(torch.float64)
    u = u.to(device=x.device, dtype=torch.float64)
    if u.ndim == 2:
        rho = torch.linalg.vector_norm(x @ u.T, dim=-1) / torch.linalg.vector_norm(x, dim=-1).clamp_min(1e-300)
    else:
        rho = (x @ u).abs() / (torch.linalg.vector_norm(x, dim=-1) * torch.linalg.vector_norm(u)).clamp_min(1e-300)
    return rho.mean() if mask is None else rho[mask.to(device=rho.device, dtype=torch.bool)].mean()


def mean_cos(x: torch.Tensor, u: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """mean over tokens of the signed cos(x, u) = ⟨x, u⟩ / (‖x‖‖u‖): which side of u the tokens are on."""
    x = x.to(torch.float64)
    u = u.to(device=x.device, dtype=torch.float64)
    cos = (x @ u) / (torch.linalg.vector_norm(x, dim=-1) * torch.linalg.vector_norm(u)).clamp_min(1e-300)
    return cos.mean() if mask is None else cos[mask.to(device=cos.device, dtype=torch.bool)].mean()


# ---- real model --------------------------------------------------------------------------------
@dataclasses.dataclass
class ModelProbe:
    """The real model on one prompt batch: the blocks' inputs from the edited layer on (re-run as the
    model is now, ``probe.BlockCache``), the states entering the edited layer's attention and the
    final states before the edit."""

    cache: BlockCache
    mask: torch.Tensor  # (P, n) real tokens
    attn_inputs: torch.Tensor  # (P, n, d) float64: states entering the edited layer's attention
    final_before: torch.Tensor  # (P, n, d) float64

    def final_states(self, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Final hidden states re-run from the cache; ``params`` optionally replaces parameters of the
        blocks (keys relative to the base model) without touching the model (differentiable)."""
        return self.cache.states(params=params)[0]

    def alignment(self, u: torch.Tensor, params: dict[str, torch.Tensor] | None = None) -> float:
        with torch.no_grad():
            return float(mean_abs_cos(self.final_states(params), u, self.mask))


def model_probe(model: Any, adapter: Adapter, layer: int, batch: PromptBatch) -> ModelProbe:
    """One forward pass of ``model`` on ``batch`` recording the blocks' inputs from the first layer
    that runs the edited weights on, and the edited layer's attention input (``layer`` < 0: an edit
    of the embeddings, every block re-run, no attention input)."""
    seq = adapter.layer_sequence()
    if layer < 0:
        got = capture(model, adapter, batch, inputs=range(len(seq)))
        start, attn = 0, torch.empty(0, dtype=torch.float64)
    else:
        start = seq.index(seq[layer])  # first layer running the edited weights (ALBERT: an earlier one)
        attention = adapter.slots()[seq[layer]]
        got = capture(model, adapter, batch, inputs=range(start, len(seq)), modules={layer: [attention]})
        attn = got.modules[(layer, attention)].to(torch.float64).cpu()
    probe = ModelProbe(cache=got.cache(model, adapter, start, batch), mask=batch.attention_mask.to(torch.bool),
                       attn_inputs=attn, final_before=torch.empty(0))
    with torch.no_grad():
        probe.final_before = probe.final_states().to(torch.float64)
    return probe


# ---- price ---------------------------------------------------------------------------------------
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


def outputs(model: Any, batch: PromptBatch, tokenizer: Any = None, head: str | None = None) -> Outputs:
    kind = head_kind(model) if head is None else head  # ``head``: the model's head_kind, known to the caller
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
            ids, sel = batch.input_ids.clone(), torch.zeros_like(batch.input_ids, dtype=torch.bool)
            sel[:, 1::4] = True  # every 4th real position from the 2nd gets the mask token
            sel &= real
            ids[sel] = int(mask_id)
            out = model(**PromptBatch(ids, batch.attention_mask).inputs(), output_hidden_states=True)
            return Outputs(torch.log_softmax(out.logits[sel].to(torch.float64), -1),
                           out.hidden_states[-1][real].to(torch.float64), "masked-token")
        out = model(**batch.inputs(), output_hidden_states=True, use_cache=False)
        return Outputs(torch.log_softmax(out.logits[real].to(torch.float64), -1),
                       out.hidden_states[-1][real].to(torch.float64), "next-token")


def price(before: Outputs, after: Outputs) -> dict:
    """{"kl": mean KL(p_before ‖ p_after) in nats, "kl_kind", "state_cosine"}."""
    kl = None if before.logp is None or after.logp is None else float(kl_per_token(before.logp, after.logp).mean())
    cos = torch.nn.functional.cosine_similarity(before.states, after.states, dim=-1).mean()
    return {"kl": kl, "kl_kind": before.kind, "state_cosine": float(cos)}


# ---- the held-out measurements of one call -------------------------------------------------------
@dataclasses.dataclass
class HeldOut:
    """The real model on the held-out prompts, measured before an edit (:meth:`before`) and
    compared after it (:meth:`after`): alignment of the final states with the target and the price."""

    batch: PromptBatch
    probe: ModelProbe
    outputs_before: Outputs
    tokenizer: Any = None
    head: str | None = None  # the model's head_kind

    @classmethod
    def before(cls, model: Any, adapter: Adapter, layer: int, prompts: Any, tokenizer: Any,
               head: str | None = None) -> "HeldOut":
        """Measure the unedited model (``layer``: the first edited execution layer; ``head``: its
        head_kind when the caller knows it)."""
        batch = encode(model, prompts, tokenizer, held_out=True, name="heldout_prompts")
        head = head_kind(model) if head is None else head
        return cls(batch, model_probe(model, adapter, layer, batch), outputs(model, batch, tokenizer, head), tokenizer,
                   head)

    def after(self, model: Any, target: torch.Tensor, gain: float, *, full: bool = False,
              signed: bool = False) -> dict:
        """Record fields of the edited model: ``alignment_model_before``/``_after`` (mean |cos| of the
        final states with ``target``), ``kl``, ``kl_kind``, ``state_cosine``; ``signed``: also the
        signed mean cos before and after (``signed_alignment_model_before``/``_after``: which side of
        one direction the states are on). Non-finite outputs are the non-finite error
        (log-probabilities may be -inf, a probability that underflowed, never NaN). ``full``: the
        edit changed what enters the first block (an embedding), so the alignment after comes from a
        full forward pass, not from the probe's cached block inputs."""
        out = outputs(model, self.batch, self.tokenizer, self.head)
        if not bool(torch.isfinite(out.states).all()) or (out.logp is not None and bool(torch.isnan(out.logp).any())):
            raise non_finite(f"gain {gain:.6g}", "model outputs on the held-out prompts")
        with torch.no_grad():
            final = out.states if full else self.probe.final_states()
            mask = None if full else self.probe.mask
            after = float(mean_abs_cos(final, target, mask))
            sides = {"signed_alignment_model_before": float(mean_cos(self.probe.final_before, target, self.probe.mask)),
                     "signed_alignment_model_after": float(mean_cos(final, target, mask))} if signed else {}
        return {"alignment_model_before": float(mean_abs_cos(self.probe.final_before, target, self.probe.mask)),
                "alignment_model_after": after, **sides, **price(self.outputs_before, out)}


def default_measure(call: Any, plan: Any, held: "HeldOut | None") -> dict:
    """A steering method's default measurement (``Method.measure``): the held-out alignment of the
    edited ``call.model`` with the plan's target and the price (KL, state cosine), when measured."""
    if held is None:
        return {}
    target = plan.target if plan.target is not None else plan.direction if plan.direction is not None \
        else plan.edits[0].u
    return held.after(call.model, target, plan.edits[0].gain, full=any(e.layer < 0 for e in plan.edits))
