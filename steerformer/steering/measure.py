"""Where and what steering measures, on the real model and on the paper's dynamics.

* Prompts (``encode``): the reference and held-out sentences (seeded random ids for a model
  without tokenizer), as model inputs on the model's device.
* Probes: the controlled dynamics (docs/math.md §3) and the real model's final states, re-run from a
  cache so that only what an edit changes is recomputed (``dynamics_probe``, ``model_probe``).
* Price: the KL divergence of the model's output distributions (``outputs``, ``price``).
* FFN pre-compensation (``compensate``).
* :class:`HeldOut`: the held-out measurements of one call, taken before the edit and compared after.

Probes. Both reuse the states entering the edited layer and recompute only what the edit changes:

* controlled dynamics (docs/math.md §3): the layer's attention output is out₀ + γ u (a·z_i), z_i the
  concatenated head outputs, so the next state N(x + out₀ + γ c_i u) is closed-form in γ;
* real model: every block from the edited one on is re-run on the inputs it received in one
  cached forward pass (same masks and positional arguments), then the final norm. Only the edited
  layer's output weight differs between runs; for a weight-sharing model (ALBERT) the chain starts
  at the first layer that runs the shared weights.

Price: the KL divergence of the model's output distributions before and after the edit.

* LM head (``*ForCausalLM`` / ``*LMHeadModel``): next-token distributions at every real position.
* Masked-LM head: every 4th real position (from the 2nd) is replaced by the tokenizer's mask
  token and the distributions at those positions are compared (no mask token known: no KL).
* Bare model without head (``BertModel``, MiniLM, ``GPT2Model``): there is no output distribution,
  so steerformer uses the *embedding readout* softmax(h Eᵀ) with E the input embedding matrix —
  the tied-unembedding / logit-lens view of the final states (``kl_kind="embedding-readout"``).
  When the embedding width differs from the hidden width (ALBERT) no KL is reported (None).
Every case also reports the mean cosine between the original and the steered final states.

FFN pre-compensation (power-method paper, Section 5). Steering the attention output toward u
does not put the layer's *output* on u: the FFN map and the affine LayerNorms that follow deform
it (on MiniLM the final states saturate near |cos| ≈ 0.78 whatever the gain). Pre-compensation solves numerically for the direction u to steer the
attention toward so that the real final states, FFN and norms included, align with the wanted u*:

    max_u  mean_i |cos(h_i(u), u*)|,   h(u) = final states with W_O + γ u a,  ‖u‖ = 1

by Adam on u (re-normalized each step) through a differentiable re-run of the cached blocks
(``torch.func.functional_call``), starting at u = u*, at a fixed gain γ.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch

from ..adapters.base import Adapter, AttentionWeights, split_output_heads
from ..errors import SteerformerError, bad_argument
from ..loading import ModelSource
from ..prompts import HELDOUT_SENTENCES, REFERENCE_SENTENCES, PromptBatch, check_fits, words_of
from .common import non_finite
from .probe import BlockCache, capture, kl_per_token, model_device


# ---- prompts -------------------------------------------------------------------------------------
def encode(model: Any, prompts: Sequence[str] | torch.Tensor | None, tokenizer: Any, *, held_out: bool = False,
           n_random: int = 8, n_tokens: int = 12, name: str = "prompts") -> PromptBatch:
    """Prompts as model inputs, on the model's device: strings through the tokenizer, a (P, n) id
    tensor as is, or the defaults (sentences with a tokenizer, seeded random ids without)."""
    return _encode(model, prompts, tokenizer, held_out=held_out, n_random=n_random, n_tokens=n_tokens,
                   name=name).to(model_device(model))


def _encode(model: Any, prompts: Sequence[str] | torch.Tensor | None, tokenizer: Any, *, held_out: bool,
            n_random: int, n_tokens: int, name: str) -> PromptBatch:
    if isinstance(prompts, torch.Tensor):
        if prompts.ndim != 2 or prompts.dtype not in (torch.int64, torch.int32):
            raise bad_argument(name, f"tensor {tuple(prompts.shape)} {prompts.dtype}", "a (prompts, tokens) integer tensor of token ids")
        vocab = int(model.config.vocab_size)
        if prompts.numel() == 0 or int(prompts.min()) < 0 or int(prompts.max()) >= vocab:
            shown = "empty" if prompts.numel() == 0 else f"ids in [{int(prompts.min())}, {int(prompts.max())}]"
            raise bad_argument(name, f"tensor {tuple(prompts.shape)} with {shown}",
                               f"a non-empty tensor of token ids in [0, {vocab - 1}] (vocab_size={vocab})")
        return PromptBatch(prompts.long(), torch.ones_like(prompts, dtype=torch.long))
    if prompts is None and tokenizer is None:
        vocab = int(model.config.vocab_size)
        g = torch.Generator().manual_seed(1 if held_out else 0)
        ids = torch.randint(min(5, vocab - 1), vocab, (n_random, n_tokens), generator=g)
        return PromptBatch(ids, torch.ones_like(ids))
    if prompts is None:
        prompts = HELDOUT_SENTENCES if held_out else REFERENCE_SENTENCES
    if tokenizer is None:
        raise bad_argument(name, list(prompts)[:2], "token ids (a tensor) when no tokenizer is known",
                           "Pass tokenizer=... or a (prompts, tokens) id tensor.")
    prompts = [str(p) for p in prompts]
    if not prompts:
        raise bad_argument(name, prompts, "at least one prompt")
    batch = PromptBatch.from_texts(prompts, tokenizer)  # never sets tokenizer.pad_token
    check_fits(batch.input_ids.shape[1], max_positions(model), name=name, value=f"a prompt of {words_of(prompts)}",
               what="prompts", fix="Shorten the longest prompt.")
    return batch


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
    if mask is None:
        return rho.mean()
    m = mask.to(device=rho.device, dtype=torch.bool)
    return rho[m].mean()


def mean_cos(x: torch.Tensor, u: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """mean over tokens of the signed cos(x, u) = ⟨x, u⟩ / (‖x‖‖u‖): which side of u the tokens are on."""
    x = x.to(torch.float64)
    u = u.to(device=x.device, dtype=torch.float64)
    cos = (x @ u) / (torch.linalg.vector_norm(x, dim=-1) * torch.linalg.vector_norm(u)).clamp_min(1e-300)
    return cos.mean() if mask is None else cos[mask.to(device=cos.device, dtype=torch.bool)].mean()


# ---- controlled dynamics -----------------------------------------------------------------------
@dataclasses.dataclass
class DynamicsProbe:
    """Alignment ρ(x(L+1), u) of the controlled dynamics as a function of the gain γ."""

    y0: torch.Tensor  # (P, n, d) x + out₀ before normalization
    z: torch.Tensor  # (P, n, d) concatenated head outputs entering W_O
    rerun: Callable[[torch.Tensor], torch.Tensor] | None = None  # shared weights: full rerun given ΔW_O

    def states(self, delta: torch.Tensor) -> torch.Tensor:
        """Output states of the edited layer for the output-weight change ``delta`` (d, d)."""
        if self.rerun is not None:
            return self.rerun(delta)
        from ..dynamics import normalize

        return normalize(self.y0 + self.z @ delta.to(self.z.device).T)

    def alignment(self, delta: torch.Tensor, u: torch.Tensor) -> float:
        return float(mean_abs_cos(self.states(delta), u))


def dynamics_probe(source: ModelSource, layer: int, *, n_prompts: int = 30, n_tokens: int = 10, seed: int = 0) -> DynamicsProbe:
    """Run the §3 dynamics up to ``layer`` once and keep what one more step needs."""
    # the paper's method only: the dynamics' modules (attention, discrete, tokens) stay unimported
    # when a causal LM is steered by addition
    from ..attention import attention_probs
    from ..dynamics import random_tokens, run_dynamics
    from ..matrices import read_attention_weights

    adapter = source.adapter
    d = adapter.d_model
    seq = adapter.layer_sequence()
    x0 = random_tokens(n_prompts, n_tokens, d, seed=seed)
    # The controlled dynamics run on the CPU (float64 copies of the weights), whatever the model's device.
    weights = read_attention_weights(source, sorted(set(range(layer + 1))), device="cpu")
    if seq[layer] in seq[:layer]:
        # The edited weights also run before ``layer`` (ALBERT): rerun the whole stack each time.
        def rerun(delta: torch.Tensor) -> torch.Tensor:
            W = {k: _with_delta(w, delta) if seq[k] == seq[layer] else w for k, w in weights.items()}
            return run_dynamics(source, x0, layers=list(range(layer + 1)), weights=W).states[-1]

        return DynamicsProbe(y0=x0, z=x0, rerun=rerun)
    x = run_dynamics(source, x0, layers=list(range(layer)), weights=weights).states[-1] if layer > 0 else x0
    w = weights[layer]
    with torch.no_grad():
        A = attention_probs(x, w)  # (P, H, n, n)
        v = torch.einsum("pnd,hkd->phnk", x, w.value_heads())
        heads = A @ v  # (P, H, n, d_h)
        z = heads.permute(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)  # head h → column block h of W_O
        out0 = z @ w.output_matrix().T
    return DynamicsProbe(y0=x + out0, z=z)


def _with_delta(w: AttentionWeights, delta: torch.Tensor) -> AttentionWeights:
    return dataclasses.replace(w, W_O=split_output_heads(w.output_matrix() + delta, w.n_heads))


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

    def split_inputs(self, fraction: float = 2 / 3) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention-input states of the real tokens, (fit, held-out) split by prompt."""
        P = self.mask.shape[0]
        k = min(max(1, int(round(P * fraction))), P - 1) if P > 1 else 1
        X, m = self.attn_inputs, self.mask.cpu()
        held = X[k:][m[k:]] if P > 1 else X[m][1::2]
        fit = X[:k][m[:k]] if P > 1 else X[m][0::2]
        return fit, held


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


def _masked(batch: PromptBatch, mask_id: int) -> tuple[PromptBatch, torch.Tensor]:
    ids = batch.input_ids.clone()
    sel = torch.zeros_like(ids, dtype=torch.bool)
    sel[:, 1::4] = True
    sel &= batch.attention_mask.to(torch.bool)
    ids[sel] = int(mask_id)
    return PromptBatch(ids, batch.attention_mask), sel


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
        kl = float(kl_per_token(before.logp, after.logp).mean())
    cos = torch.nn.functional.cosine_similarity(before.states, after.states, dim=-1).mean()
    return {"kl": kl, "kl_kind": before.kind, "state_cosine": float(cos)}


# ---- FFN pre-compensation ------------------------------------------------------------------------
def compensate(probe: ModelProbe, target: torch.Tensor, stored_for: Callable[[torch.Tensor], dict[str, torch.Tensor]],
               *, steps: int = 60, lr: float = 0.05,
               on_step: Callable[[float], None] | None = None) -> tuple[torch.Tensor, list[float]]:
    """Direction u (unit, float64) whose edit best aligns the final states with ``target``.

    ``stored_for(u)`` gives the replaced parameters (differentiable in u) for the fixed gain.
    Returns u and the alignment history (one value per step, the first at u = target)."""
    u = target.detach().clone().to(torch.float64).requires_grad_(True)
    opt = torch.optim.Adam([u], lr=lr)
    history: list[float] = []
    best = (-1.0, target.detach().clone())
    for _ in range(steps):
        unit = u / u.norm()
        h = probe.final_states(stored_for(unit))
        score = mean_abs_cos(h, target, probe.mask)
        val = float(score.detach())
        history.append(val)
        if on_step is not None:
            on_step(val)
        if val > best[0]:
            best = (val, unit.detach().clone())
        opt.zero_grad()
        (-score).backward()
        opt.step()
    return best[1], history


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

    def after(self, model: Any, target: torch.Tensor, gain: float, *, full: bool = False) -> dict:
        """Record fields of the edited model: ``alignment_model_before``/``_after`` (mean |cos| of the
        final states with ``target``), ``kl``, ``kl_kind``, ``state_cosine``. Non-finite outputs
        are the non-finite error (log-probabilities may be -inf, a probability that underflowed,
        never NaN). ``full``: the edit changed what enters the first block (an embedding), so the
        alignment after comes from a full forward pass, not from the probe's cached block inputs."""
        out = outputs(model, self.batch, self.tokenizer, self.head)
        if not bool(torch.isfinite(out.states).all()) or (out.logp is not None and bool(torch.isnan(out.logp).any())):
            raise non_finite(f"gain {gain:.6g}", "model outputs on the held-out prompts")
        with torch.no_grad():
            final = out.states if full else self.probe.final_states()
            mask = None if full else self.probe.mask
            after = float(mean_abs_cos(final, target, mask))
            one = target.ndim == 1  # a side of u exists for one direction only (ablation may remove several)
            signed = {"signed_alignment_model_before": float(mean_cos(self.probe.final_before, target, self.probe.mask)),
                      "signed_alignment_model_after": float(mean_cos(final, target, mask))} if one else {}
        return {"alignment_model_before": float(mean_abs_cos(self.probe.final_before, target, self.probe.mask)),
                "alignment_model_after": after, **signed, **price(self.outputs_before, out)}

    def predicted_u_shift(self, w_eff: torch.Tensor, gain: float) -> float:
        """γ · mean w_effᵀx over the held-out tokens entering the edited layer: the coefficient of u
        that F' = F + γ u w_effᵀ (the stacked-value picture) predicts the edit adds — its sign is the
        side of u the final states should move to."""
        X = self.probe.attn_inputs[self.probe.mask.to(self.probe.attn_inputs.device)]
        return float(gain) * float((X @ w_eff.to(device=X.device, dtype=torch.float64)).mean())


def default_measure(call: Any, plan: Any, held: "HeldOut | None") -> dict:
    """A steering method's default measurement (``Method.measure``): the held-out alignment of the
    edited ``call.model`` with the plan's target and the price (KL, state cosine), when measured."""
    if held is None:
        return {}
    target = plan.target if plan.target is not None else plan.direction if plan.direction is not None \
        else plan.edits[0].u
    return held.after(call.model, target, plan.edits[0].gain, full=any(e.layer < 0 for e in plan.edits))
