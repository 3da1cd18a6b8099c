"""A trained steering edit: a low-rank change ΔW = Σ_k u_k a_k of one or a few residual writers
(the MLP output projection of middle layers, by default), learned from data instead of taken from
a mean difference — the weight-space counterpart of AxBench's trained interventions (Wu et al.
2025, "Improved representation steering for language models": LoRA / steering vectors trained with
the RePS objective beat DiffMean and prompting).

The data: examples (question, positive answer[, negative answer]).

* Generated (:func:`generate_examples`): the base model answers each TRAIN question under strong
  run-time steering along the concept's DiffMean direction (``activation_steering``, sampled, a
  few coefficients); answers a judge accepts (concept, relevance and fluency each ≥ 1) are the
  positives, the base model's own greedy answer to the same question the negative.
* The user's own (:func:`user_examples`): positive texts (answers to an empty user turn), or pairs
  / triples ``{"prompt", "positive"[, "negative"]}``.

The objective (:func:`train_edit`), per step, the edit applied as a LoRA forward (a hook adding
g·(z Aᵀ) Uᵀ at each edited writer; gradients flow only through the blocks from the first edited
layer on, whose inputs are cached once):

* ``sft``: the mean per-token NLL of the positive answers, edit on;
* ``reps``: RePS's reference-free bidirectional preference (the positive answer preferred over the
  negative with the edit at +1, the negative preferred with the edit at −1; each side's β the
  base model's log-likelihood gap, at least 1): −log σ(Δ⁺) − log σ(Δ⁻);
* ``sft+reps``: both;
* plus ``kl_weight`` × KL(p_base ‖ p_edit), mean over the tokens of neutral text (the base model's
  own answers to the TRAIN questions, teacher-forced): the price the evaluation measures.

The result is plain :class:`~steerformer.steering.edit.Edit` values: u (out, k) with unit columns,
a (k, in), and the gain (1.0, or the strength chosen on the SELECTION questions): they apply,
undo bit for bit, and export as every edit does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from ...configs import Config, option, progress_bar
from ...errors import bad_argument
from ...prompts import REPORT_QUESTIONS, SELECTION_QUESTIONS, PromptBatch
from ..edit import Edit
from ..lifecycle import Call, Plan
from .registry import Method, register_method

OBJECTIVES = ("sft", "reps", "sft+reps")
WRITERS = ("mlp", "attention")
INITS = ("diffmean", "zero")

#: TRAIN questions: data generation and training only (never the selection or report questions)
TRAIN_QUESTIONS = (
    "How do I make a good first impression?",
    "What are some easy ways to eat healthier?",
    "How can I get better at public speaking?",
    "What should I do on a rainy weekend?",
    "How do I start a small business?",
    "What are some tips for a long flight?",
    "How can I motivate myself to exercise?",
    "How do I write a short story?",
    "What is a good way to learn to cook?",
    "How can I make my home feel cozier?",
    "What should I know before adopting a dog?",
    "How do I prepare for a marathon?",
    "What are some fun things to do with kids?",
    "How can I save time on household chores?",
    "How do I ask for a raise?",
    "What makes a good team leader?",
    "How can I learn to draw?",
    "What should I bring to a picnic?",
    "How do I keep a journal?",
    "What are some tips for moving to a new city?",
    "How can I be more creative?",
    "How do I plan a road trip?",
    "What is a good hobby to pick up?",
    "How can I make a small apartment look bigger?",
)

#: the selection questions (the strength's choice) and the report questions are the one split of
#: ``prompts.SPLITS`` (imported above); TRAIN_QUESTIONS is disjoint from both (a test checks it)
__all__ = ["TRAIN_QUESTIONS", "SELECTION_QUESTIONS", "REPORT_QUESTIONS", "TrainedConfig", "Example", "Trained",
           "generate_examples", "user_examples", "train_edit", "trained_steering", "examples_sha256", "scaled"]


@dataclasses.dataclass
class TrainedConfig(Config):
    """Options of the trained steering edit (docs/steering-chat.md)."""

    concept: str = option("", "The word or phrase to steer toward (the data generation's direction and judge).")
    layers: tuple = option((19,), "Execution layers whose writer is edited (a LoRA on each).", cli_type=str)
    writer: str = option("mlp", "Which writer of each layer: the MLP output projection or the attention output.",
                         choices=WRITERS)
    rank: int = option(1, "Rank k of each edit (u: out x k, a: k x in).")
    steps: int = option(80, "Optimizer steps.")
    lr: float = option(0.02, "Adam learning rate, relative to each tensor's RMS at initialization.")
    batch_size: int = option(8, "Examples per step.")
    kl_weight: float = option(1.0, "Weight of KL(base || edited) on neutral text (the base answers).")
    objective: str = option("sft+reps", "Training objective.", choices=OBJECTIVES)
    init: str = option("diffmean", "Start from the DiffMean weight edit (a fraction of the data's coefficient) or 0.",
                       choices=INITS)
    init_scale: float = option(0.5, "The DiffMean start as a fraction of the generation coefficient.")
    data: str | None = option(None, "JSONL of your own examples: {prompt, positive[, negative]} or {text}.",
                              cli_type=str)
    coeffs: tuple = option((0.25,), "Generation: hook coefficients (x the residual norm) sampled under.",
                           cli_type=str)
    samples: int = option(2, "Generation: sampled answers per question and coefficient.")
    max_answer_tokens: int = option(40, "Answer tokens generated and trained on.")
    gains: tuple = option((0.75, 1.0, 1.25), "Strengths tried on the selection questions (x the trained edit).",
                          cli_type=str)
    select_max_kl: float = option(0.45, "The strength chosen is the best judged one with KL <= this on the selection "
                                 "questions.")
    seed: int = option(0, "Seed of the sampling, the initialization and the batches.")

    def __post_init__(self) -> None:
        self.check_types()
        for name in ("rank", "steps", "batch_size", "samples", "max_answer_tokens"):
            v = getattr(self, name)
            if v < 1:
                raise bad_argument(name, v, "a positive integer")
        for name in ("lr", "kl_weight", "init_scale", "select_max_kl"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 \
                    or (name in ("lr", "select_max_kl") and v == 0):
                raise bad_argument(name, v, "a finite number > 0" if name in ("lr", "select_max_kl") else "a finite number >= 0")
        for name, allowed in (("objective", OBJECTIVES), ("writer", WRITERS), ("init", INITS)):
            if getattr(self, name) not in allowed:
                raise bad_argument(name, getattr(self, name), f"one of {allowed}")
        self.layers = tuple(self.layers) if isinstance(self.layers, (list, tuple)) else (self.layers,)
        if not self.layers or not all(isinstance(k, int) and not isinstance(k, bool) for k in self.layers):
            raise bad_argument("layers", self.layers, "execution layers as whole numbers, e.g. (19,)")
        for name in ("coeffs", "gains"):
            v = tuple(getattr(self, name))
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in v):
                raise bad_argument(name, v, "positive numbers")
            setattr(self, name, v)
        if not self.gains:
            raise bad_argument("gains", self.gains, "at least one strength")


# ---- examples ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Example:
    """One training example: token ids of the prompt (chat template applied), the positive answer,
    and optionally the negative one (the base model's answer)."""

    prompt: list[int]
    positive: list[int]
    negative: list[int] | None = None
    source: str = "user"
    question: str = ""


def examples_sha256(examples: Sequence[Example]) -> str:
    """sha256 of the examples' token ids (the record's data hash)."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.prompt, e.positive, e.negative]).encode())
    return h.hexdigest()


def chat_prompt(tokenizer: Any, question: str) -> list[int]:
    from ..chat import chat_rows, has_chat_template

    if has_chat_template(tokenizer):
        return chat_rows(tokenizer, [question])[0]
    ids = tokenizer(question)["input_ids"] if question else []
    return list(ids) or [int(getattr(tokenizer, "bos_token_id", None) or 0)]


def answer_ids(tokenizer: Any, text: str, max_tokens: int) -> list[int]:
    return list(tokenizer(str(text), add_special_tokens=False)["input_ids"])[:max_tokens]


def user_examples(tokenizer: Any, data: Any, *, max_answer_tokens: int = 40) -> list[Example]:
    """The user's own data as examples: a JSONL path, or a list of strings (positive texts: answers
    to an empty user turn) or of mappings ``{"prompt", "positive"[, "negative"]}`` (``{"text"}``
    is a positive text)."""
    rows: list = []
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.is_file():
            raise bad_argument("data", str(data), "a JSONL file of {prompt, positive[, negative]} or {text} rows",
                               "Check the path.")
        for i, line in enumerate(path.read_text().splitlines()):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise bad_argument("data", f"{path}:{i + 1}", "one JSON object per line", str(e)) from None
    else:
        rows = list(data or [])
    if not rows:
        raise bad_argument("data", data, "at least one positive text or {prompt, positive} pair")
    out = []
    for i, r in enumerate(rows):
        if isinstance(r, str):
            r = {"text": r}
        if not isinstance(r, Mapping) or not (r.get("positive") or r.get("text")):
            raise bad_argument("data", f"row {i + 1}: {str(r)[:60]}", 'a text or {"prompt": ..., "positive": ...}')
        prompt = str(r.get("prompt") or "")
        pos = answer_ids(tokenizer, r.get("positive") or r.get("text"), max_answer_tokens)
        neg = answer_ids(tokenizer, r["negative"], max_answer_tokens) if r.get("negative") else None
        out.append(Example(prompt=chat_prompt(tokenizer, prompt), positive=pos, negative=neg, source="user",
                           question=prompt))
    return out


# ---- data generation ---------------------------------------------------------------------------------
def generate_examples(model: Any, tokenizer: Any, concept: str, questions: Sequence[str], *, layer: int = 19,
                      coeffs: Sequence[float] = (0.25,), samples: int = 2, max_answer_tokens: int = 40,
                      judge: Any = "offline", seed: int = 0, vector: Any = None, probe: Any = None,
                      progress: Any = True) -> tuple[list[Example], dict]:
    """Examples from answers sampled under strong run-time steering along the concept's DiffMean
    direction at ``layer`` (``coeffs`` × the residual norm; ``vector``: {layer: v} to use instead),
    kept when ``judge`` (any ``judge.Judge``; default the offline judge) rates them ≥ 1 on concept,
    relevance and fluency; the negative is the base model's greedy answer to the same question.
    Returns the examples and what was done (every question seen, acceptance per coefficient)."""
    from ..activation import activation_steering
    from .addition.calibrate import addition_vectors
    from ..evaluation.evaluate import Baseline, answer_logprobs, answer_nlls, generate_answers, judge_items, word_forms
    from ..evaluation.judge import judge_answers, make_judge

    judge = make_judge(judge)
    words = word_forms(concept)
    bar = progress_bar(progress, "generating data", total=1 + len(coeffs) * samples)
    base = Baseline.of(model, tokenizer, list(questions), max_new_tokens=max_answer_tokens)
    bar.update(1)
    vec = vector if vector is not None else addition_vectors(model, tokenizer, concept, [layer], probe=probe)
    examples, stats = [], {}
    for c in coeffs:
        kept = 0
        for s in range(samples):
            with activation_steering(model, vec, coeff=float(c), positions="skip-first"):
                ans = generate_answers(model, tokenizer, base.prompts, max_new_tokens=max_answer_tokens,
                                       sample=True, seed=seed + 1000 * s + int(1000 * c))
            texts = [tokenizer.decode(a, skip_special_tokens=True) for a in ans]
            nlls = answer_nlls(answer_logprobs(model, base.free_prompts, ans), ans)
            ratings = judge_answers(judge_items(base, texts, concept, words, nlls), judge)
            for i, (a, r) in enumerate(zip(ans, ratings)):
                if r.good and a:
                    examples.append(Example(prompt=base.prompts[i], positive=list(a), negative=list(base.answers[i]),
                                            source=f"generated c={c:g}", question=base.questions[i]))
                    kept += 1
            bar.update(1)
        stats[f"{c:g}"] = kept / (samples * len(questions))
    bar.close()
    info = {"questions": list(questions), "base_answers": base.texts, "layer": layer, "coeffs": list(coeffs),
            "samples": samples, "accepted": stats, "n_examples": len(examples),
            "judge": getattr(judge, "name", type(judge).__name__)}
    return examples, info


# ---- training ----------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Cached:
    """One fixed batch of prompt + answer rows, the inputs of every block from ``start`` cached."""

    calls: list  # (block path, args, kwargs)
    select: torch.Tensor  # (B, n) bool: positions that predict an answer token
    targets: torch.Tensor  # (N,) the answer tokens
    row: torch.Tensor  # (N,) the example each target belongs to
    n_rows: int
    base_logprobs: torch.Tensor | None = None  # (N, vocab) for the KL
    base_token_logprob: torch.Tensor | None = None  # (n_rows,) mean log p_base(answer) per row


def _replace_hidden(args: tuple, kwargs: dict, h: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (h, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": h}


class _Stop(Exception):
    pass


@torch.no_grad()
def _cache(model: Any, adapter: Any, start: int, prompts: Sequence[list[int]], answers: Sequence[list[int]],
           pad: int, device: Any) -> _Cached:
    base = model.base_model
    seq = adapter.layer_sequence()
    rows = [list(p) + list(a) for p, a in zip(prompts, answers)]
    batch = PromptBatch.from_rows(rows, pad_id=pad).to(device)
    select = torch.zeros_like(batch.attention_mask, dtype=torch.bool)
    targets, row = [], []
    for i, (p, a) in enumerate(zip(prompts, answers)):
        select[i, len(p) - 1:len(p) - 1 + len(a)] = True
        targets += list(a)
        row += [i] * len(a)
    calls: list = []
    names = [adapter.layer_block(seq[k]) for k in range(start, len(seq))]
    handles = [base.get_submodule(n).register_forward_pre_hook(
        lambda m, a, kw, n=n: calls.append((n, a, dict(kw))), with_kwargs=True) for n in names]
    last = base.get_submodule(names[-1]).register_forward_pre_hook(lambda m, a, kw: (_ for _ in ()).throw(_Stop()),
                                                                    with_kwargs=True)
    kw = {"use_cache": False} if getattr(model.config, "use_cache", None) is not None else {}
    try:
        base(**batch.inputs(), **kw)
    except _Stop:
        pass
    finally:
        for h in handles + [last]:
            h.remove()
    return _Cached(calls=calls, select=select, targets=torch.tensor(targets, device=device),
                   row=torch.tensor(row, device=device), n_rows=len(rows))


def _logprobs(model: Any, adapter: Any, cache: _Cached) -> torch.Tensor:
    """log p at the answer positions, blocks re-run from the cache (differentiable in the hooks)."""
    base = model.base_model
    h = None
    for name, args, kwargs in cache.calls:
        if h is not None:
            args, kwargs = _replace_hidden(args, kwargs, h)
        out = base.get_submodule(name)(*args, **kwargs)
        h = out[0] if isinstance(out, (tuple, list)) else out
    norm = adapter.final_norm(base)
    if norm is not None:
        h = norm(h)
    return torch.log_softmax(model.get_output_embeddings()(h[cache.select]).float(), -1)


def _mean_per_row(values: torch.Tensor, cache: _Cached) -> torch.Tensor:
    s = torch.zeros(cache.n_rows, device=values.device, dtype=values.dtype).index_add(0, cache.row, values)
    n = torch.zeros(cache.n_rows, device=values.device, dtype=values.dtype).index_add(
        0, cache.row, torch.ones_like(values))
    return s / n.clamp_min(1)


class LoRAHooks:
    """g·(z Aᵀ)Uᵀ added to each edited writer's output (the LoRA forward): trainable U, A per
    layer, and a sign/scale ``factor`` (+1 steers, −1 the RePS null side)."""

    def __init__(self, model: Any, writers: Mapping[int, Any], U: Mapping[int, torch.Tensor],
                 A: Mapping[int, torch.Tensor], scale: Mapping[int, float]) -> None:
        self.model, self.writers, self.U, self.A, self.scale = model, dict(writers), dict(U), dict(A), dict(scale)
        self.factor = 1.0
        self.handles: list = []

    def __enter__(self) -> "LoRAHooks":
        base = self.model.base_model
        for k, w in self.writers.items():
            def hook(m, args, out, k=k):
                z = args[0]
                add = (z.to(self.A[k].dtype) @ self.A[k].T) @ self.U[k].T
                return out + (self.factor * self.scale[k]) * add.to(out.dtype)
            self.handles.append(base.get_submodule(w.module).register_forward_hook(hook))
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def edit_writers(adapter: Any, layers: Sequence[int], writer: str, model_id: str) -> dict[int, Any]:
    """{layer: Writer}: the MLP output projection (``output_writer``) or the attention output."""
    from .addition.weights import output_writer

    seq = adapter.layer_sequence()
    out = {}
    for k in layers:
        if writer == "mlp":
            out[k] = output_writer(adapter, k, model_id)
        else:
            att = [w for w in adapter.block_writers(seq[k]) if w.kind == "attention"]
            if not att or att[0].norm is not None:
                raise bad_argument("writer", writer, "'mlp' for this model (its attention output is normalized or "
                                   "undeclared)")
            out[k] = att[0]
    return out


def train_edit(model: Any, tokenizer: Any, examples: Sequence[Example], *, layers: Sequence[int] = (15, 19),
               writer: str = "mlp", rank: int = 1, steps: int = 80, lr: float = 0.02, batch_size: int = 8,
               kl_weight: float = 1.0, objective: str = "sft+reps", neutral: Sequence[Example] | None = None,
               init: Mapping[int, tuple[torch.Tensor, torch.Tensor]] | None = None, scale: Mapping[int, float] | None = None,
               seed: int = 0, progress: Any = True) -> tuple[list[Edit], dict]:
    """Train a rank-``rank`` edit of the writers of ``layers`` on ``examples`` (module docstring).

    ``neutral``: the KL penalty's text (prompt + the base model's own answer, as ``positive``);
    default: each example's negative. ``init``: {layer: (u (out, k), a (k, in))} to start from
    (e.g. the DiffMean edit), default u = 0 and a random; ``scale``: {layer: g} a fixed factor of
    each layer's U A (default 1). Returns the edits (gain 1.0; not applied) and ``info`` (losses,
    seconds, every prompt seen)."""
    from ...loading import open_source
    from ..evaluation.evaluate import model_device, pad_id

    if objective not in OBJECTIVES:
        raise bad_argument("objective", objective, f"one of {OBJECTIVES}")
    for name, v in (("rank", rank), ("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise bad_argument(name, v, "a positive integer")
    if not (isinstance(kl_weight, (int, float)) and kl_weight >= 0 and math.isfinite(kl_weight)):
        raise bad_argument("kl_weight", kl_weight, "a finite number >= 0")
    examples = [e for e in examples if e.positive]
    if not examples:
        raise bad_argument("examples", [], "at least one example with a non-empty positive answer")
    if objective != "sft" and any(e.negative is None for e in examples):
        raise bad_argument("objective", objective, "examples that all carry a negative answer (pairs)",
                           "Use objective='sft' for positive texts alone.")
    t0 = time.perf_counter()
    source = open_source(model)
    adapter = source.adapter
    layers = sorted(int(k) for k in layers)
    writers = edit_writers(adapter, layers, writer, source.model_id)
    dev = model_device(model)
    pad = pad_id(tokenizer) if tokenizer is not None else 0
    start = layers[0]
    gen = torch.Generator().manual_seed(int(seed))

    # the neutral text of the KL: each distinct prompt's base answer; with pairs and RePS the KL is
    # read off the negatives' pass with the edit on (the same text: one forward and backward saved)
    shared_kl = neutral is None and objective != "sft" and kl_weight > 0
    if neutral is None:
        seen, neutral = set(), []
        for e in examples:
            if e.negative is not None and tuple(e.prompt) not in seen:
                seen.add(tuple(e.prompt))
                neutral.append(Example(prompt=e.prompt, positive=e.negative, source="neutral", question=e.question))
    neutral = [e for e in neutral if e.positive]

    # trainable factors
    base = model.base_model
    U, A, params = {}, {}, []
    for k, w in writers.items():
        W = base.get_parameter(w.weight)
        out_dim, in_dim = (W.shape[1], W.shape[0]) if w.transposed else (W.shape[0], W.shape[1])
        if init is not None and k in init:
            u0, a0 = init[k]
            u0 = u0.reshape(out_dim, -1).to(torch.float32)
            a0 = a0.reshape(-1, in_dim).to(torch.float32)
            extra = rank - u0.shape[1]
            if extra > 0:
                u0 = torch.cat([u0, torch.zeros(out_dim, extra)], 1)
                a0 = torch.cat([a0, torch.randn(extra, in_dim, generator=gen) * a0.norm(dim=1).mean() / in_dim ** .5], 0)
            u0, a0 = u0[:, :rank], a0[:rank]
        else:
            u0 = torch.zeros(out_dim, rank)
            a0 = torch.randn(rank, in_dim, generator=gen) / in_dim ** 0.5
        U[k] = u0.clone().to(dev).requires_grad_(True)
        A[k] = a0.clone().to(dev).requires_grad_(True)
        ru = float(u0.pow(2).mean().sqrt()) or 1.0 / out_dim ** 0.5
        ra = float(a0.pow(2).mean().sqrt()) or 1.0 / in_dim ** 0.5
        params += [{"params": [U[k]], "lr": lr * ru}, {"params": [A[k]], "lr": lr * ra}]
    g = {k: float((scale or {}).get(k, 1.0)) for k in layers}

    # fixed batches, their upper blocks' inputs cached (no grad below the first edited layer)
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        order = torch.randperm(len(examples), generator=gen).tolist()
        chunks = [[examples[i] for i in order[j:j + batch_size]] for j in range(0, len(order), batch_size)]
        pos_cache = [_cache(model, adapter, start, [e.prompt for e in c], [e.positive for e in c], pad, dev)
                     for c in chunks]
        neg_cache = [_cache(model, adapter, start, [e.prompt for e in c], [e.negative for e in c], pad, dev)
                     for c in chunks] if objective != "sft" else []
        nchunks = [neutral[j:j + batch_size] for j in range(0, len(neutral), batch_size)]
        kl_cache = [_cache(model, adapter, start, [e.prompt for e in c], [e.positive for e in c], pad, dev)
                    for c in nchunks] if kl_weight > 0 and neutral and not shared_kl else []
        with torch.no_grad():  # the base model's side: KL references and RePS's β
            for c in kl_cache:
                c.base_logprobs = _logprobs(model, adapter, c)
            for c in pos_cache + neg_cache:
                lp = _logprobs(model, adapter, c)
                c.base_token_logprob = _mean_per_row(lp.gather(1, c.targets[:, None])[:, 0], c)
                if shared_kl and any(c is n for n in neg_cache):
                    c.base_logprobs = lp
        opt = torch.optim.Adam(params)
        hooks = LoRAHooks(model, writers, U, A, g)
        history = []
        bar = progress_bar(progress, "training the edit", total=steps)
        with hooks:
            for step in range(steps):
                i = step % len(pos_cache)
                pos = pos_cache[i]
                parts: dict[str, torch.Tensor] = {}
                hooks.factor = 1.0
                lp_pos = _mean_per_row(_logprobs(model, adapter, pos).gather(1, pos.targets[:, None])[:, 0], pos)
                if objective in ("sft", "sft+reps"):
                    parts["sft"] = -lp_pos.mean()
                if objective != "sft":
                    neg = neg_cache[i]
                    lp_neg_all = _logprobs(model, adapter, neg)
                    lp_neg = _mean_per_row(lp_neg_all.gather(1, neg.targets[:, None])[:, 0], neg)
                    if shared_kl:
                        b = neg.base_logprobs
                        parts["kl"] = (b.exp() * (b - lp_neg_all)).sum(-1).mean()
                    beta_p = (neg.base_token_logprob - pos.base_token_logprob).clamp_min(1.0)
                    hooks.factor = -1.0
                    lp_pos_m = _mean_per_row(
                        _logprobs(model, adapter, pos).gather(1, pos.targets[:, None])[:, 0], pos)
                    lp_neg_m = _mean_per_row(
                        _logprobs(model, adapter, neg).gather(1, neg.targets[:, None])[:, 0], neg)
                    hooks.factor = 1.0
                    beta_m = (pos.base_token_logprob - neg.base_token_logprob).clamp_min(1.0)
                    d_plus = beta_p * lp_pos - lp_neg
                    d_minus = beta_m * lp_neg_m - lp_pos_m
                    parts["reps"] = -(torch.nn.functional.logsigmoid(d_plus).mean()
                                      + torch.nn.functional.logsigmoid(d_minus).mean())
                if kl_cache:
                    kc = kl_cache[step % len(kl_cache)]
                    lp = _logprobs(model, adapter, kc)
                    b = kc.base_logprobs
                    parts["kl"] = (b.exp() * (b - lp)).sum(-1).mean()
                loss = sum((kl_weight * v if n == "kl" else v) for n, v in parts.items())
                opt.zero_grad()
                loss.backward()
                opt.step()
                rec = {"step": step, "loss": float(loss.detach()), **{n: float(v.detach()) for n, v in parts.items()}}
                history.append(rec)
                bar.set_postfix({n: f"{v:.3f}" for n, v in rec.items() if n != "step"})
                bar.update(1)
        bar.close()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    seq = adapter.layer_sequence()
    edits = []
    for k, w in writers.items():
        u = U[k].detach().to(torch.float64).cpu()
        a = (A[k].detach().to(torch.float64).cpu()) * g[k]
        norms = torch.linalg.vector_norm(u, dim=0)
        keep = norms > 0
        u = u[:, keep] / norms[keep]
        a = a[keep] * norms[keep][:, None]
        if u.shape[1] == 0:  # nothing learned: a zero edit of rank 1
            u, a = torch.zeros(U[k].shape[0], 1, dtype=torch.float64), torch.zeros(1, A[k].shape[1], dtype=torch.float64)
        if u.shape[1] == 1:
            u, a = u[:, 0], a[0]
        edits.append(Edit(module=w.weight, layer=k, slot=seq[k], u=u, a=a, gain=1.0, kind="add", writer=w.kind,
                          transposed=w.transposed, w=None,
                          solve={"method": "trained", "objective": objective, "rank": rank, "steps": steps}))
    info = {"objective": objective, "layers": layers, "writer": writer, "rank": rank, "steps": steps, "lr": lr,
            "batch_size": batch_size, "kl_weight": kl_weight, "seed": seed, "n_examples": len(examples),
            "n_neutral": len(neutral), "data_sha256": examples_sha256(examples),
            "prompts_seen": sorted({e.question for e in list(examples) + list(neutral)}),
            "history": history, "seconds": time.perf_counter() - t0}
    return edits, info


# ---- the whole method: data, training, the strength chosen on the selection questions ---------------
def scaled(edits: Sequence[Edit], gain: float) -> list[Edit]:
    """Copies of ``edits`` with their gain multiplied by ``gain``."""
    return [Edit.from_dict({**e.to_dict(), "gain": e.gain * float(gain)}) for e in edits]


def trained_steering(model: Any, tokenizer: Any, config: TrainedConfig, *, judge: Any = "offline",
                     examples: Sequence[Example] | None = None, progress: Any = True) -> tuple[list[Edit], dict]:
    """The trained edit of ``config.concept``: examples generated on TRAIN_QUESTIONS (plus the
    user's ``config.data`` / ``examples``), the DiffMean weight edit as the start, :func:`train_edit`,
    then the strength (``config.gains``) chosen on the SELECTION questions by the judge: the best
    (good-steer share, aggregate) with KL ≤ ``config.select_max_kl``. Returns the edits (not applied) and
    the record's information (data hash, objective, split, prompts seen, selection scores)."""
    from ...loading import open_source
    from ..activation import edits_applied
    from .addition.weights import addition_edits
    from .addition.calibrate import ContinuationProbe, addition_vectors
    from ..evaluation.evaluate import Baseline, evaluate_steering

    t0 = time.perf_counter()
    if not str(config.concept).strip():
        raise bad_argument("concept", config.concept, "the word or phrase to steer toward", "Pass concept='ocean'.")
    adapter = open_source(model).adapter
    layers = sorted(int(k) for k in config.layers)
    gen_layer = layers[-1]
    probe = ContinuationProbe.of(model, adapter, tokenizer, list(SELECTION_QUESTIONS[:4]), n_new=8)
    vectors = addition_vectors(model, tokenizer, config.concept, sorted(set(layers) | {gen_layer}), probe=probe)
    data = list(examples or [])
    gen_info: dict = {}
    if config.data:
        data += user_examples(tokenizer, config.data, max_answer_tokens=config.max_answer_tokens)
    if not data or config.coeffs:
        generated, gen_info = generate_examples(
            model, tokenizer, config.concept, TRAIN_QUESTIONS, layer=gen_layer, coeffs=tuple(config.coeffs),
            samples=config.samples, max_answer_tokens=config.max_answer_tokens, judge=judge, seed=config.seed,
            vector={gen_layer: vectors[gen_layer]}, progress=progress)
        data += generated
    if not data:
        raise bad_argument("coeffs", list(config.coeffs), "coefficients under which some answers pass the judge",
                           "Raise them, add samples, or pass your own data (data=...).")
    t_data = time.perf_counter() - t0
    init = None
    scale = None
    if config.init == "diffmean":
        c0 = config.init_scale * (max(config.coeffs) if config.coeffs else 0.2) / len(layers)
        start = addition_edits(model, {k: vectors[k] for k in layers}, c0, positions="skip-first",
                               prompts=PromptBatch.from_rows([e.prompt + e.positive for e in data[:16]],
                                                             pad_id=_pad(tokenizer)))
        init = {e.layer: (e.u.reshape(-1, 1), e.a.reshape(1, -1)) for e in start}
        scale = {e.layer: e.gain for e in start}
    edits, info = train_edit(model, tokenizer, data, layers=layers, writer=config.writer, rank=config.rank,
                             steps=config.steps, lr=config.lr, batch_size=config.batch_size,
                             kl_weight=config.kl_weight, objective=config.objective, init=init, scale=scale,
                             seed=config.seed, progress=progress)
    t_train = time.perf_counter() - t0
    # the strength: chosen on the selection questions only
    sel_base = Baseline.of(model, tokenizer, list(SELECTION_QUESTIONS), max_new_tokens=config.max_answer_tokens)
    ev = evaluate_steering(model, tokenizer, {"trained": lambda g: edits_applied(model, scaled(edits, g))},
                           list(config.gains), concept=config.concept, baseline=sel_base, judge=judge)
    pts = ev.points
    ok = [p for p in pts if p.kl <= config.select_max_kl] or [min(pts, key=lambda p: p.kl)]
    best = max(ok, key=lambda p: ((p.good or 0.0), (p.aggregate or 0.0), -p.kl))
    chosen = scaled(edits, best.strength)
    info.update({"concept": config.concept, "config": config.to_dict(), "generation": gen_info,
                 "split": {"train": list(TRAIN_QUESTIONS), "selection": list(SELECTION_QUESTIONS),
                           "report": list(REPORT_QUESTIONS)},
                 "selection": [{"gain": p.strength, "kl": p.kl, "good": p.good, "aggregate": p.aggregate,
                                "concept_rate": p.concept_rate, "fluency_free": p.fluency_free} for p in pts],
                 "gain": best.strength, "seconds_data": t_data, "seconds_train": t_train,
                 "seconds_total": time.perf_counter() - t0,
                 # training saw info["prompts_seen"] (TRAIN questions and the user's prompts); the choices saw:
                 "selection_prompts_seen": list(SELECTION_QUESTIONS)})
    return chosen, info


def _pad(tokenizer: Any) -> int:
    from ..evaluation.evaluate import pad_id

    return pad_id(tokenizer)


@register_method("trained")
class Trained(Method):
    """``sf.steer(model, method="trained", token="ocean", tokenizer=tok)``: the trained edit (module
    docstring). The concept is ``concept=`` or the call's ``token``/``text``; ``layers=`` overrides
    the config's layers. The record's calibration carries the data's sha256, the objective, the
    split, every prompt seen and the judged scores on the selection questions."""

    config = TrainedConfig

    def plan(self, call: Call, cfg: Any) -> Plan:
        from ...matrices import select_layers
        from ..measure import head_kind

        if head_kind(call.model) != "causal-lm":
            raise bad_argument("method", "trained", f"a causal LM (a next-token head); {type(call.model).__name__} "
                               "has none")
        if call.tokenizer is None:
            raise bad_argument("tokenizer", None, "the model's tokenizer (the method generates and trains on answers)")
        concept = cfg.concept or call.token or call.text
        if not concept:
            raise bad_argument("concept", cfg.concept, "the word or phrase to steer toward",
                               "Pass concept='ocean' (or token='ocean').")
        layers = call.layers if call.layers is not None else call.config.layer
        if layers is not None:
            cfg = dataclasses.replace(cfg, layers=tuple(select_layers(layers, call.adapter.n_layers)))
        cfg = dataclasses.replace(cfg, concept=str(concept))
        edits, info = trained_steering(call.model, call.tokenizer, cfg, progress=call.config.progress)
        history = info.pop("history")
        info["loss_first"], info["loss_last"] = history[0], history[-1]
        source = {"kind": "trained", "concept": cfg.concept, "objective": cfg.objective,
                  "data_sha256": info["data_sha256"], "n_examples": info["n_examples"]}
        sel = next((p for p in info["selection"] if p["gain"] == info["gain"]), {})
        message = (f"trained {cfg.objective} edit of {cfg.writer} writers at layers {list(cfg.layers)} on "
                   f"{info['n_examples']} examples; strength x{info['gain']:g} chosen on the selection questions "
                   f"(good {sel.get('good')}, KL {sel.get('kl', float('nan')):.3f})")
        u = edits[0].u
        return Plan(edits=edits, direction_source=source, message=message, calibration=info, heldout_layer=None,
                    direction=u if u.ndim == 1 else u[:, 0])  # the record's direction: the first column

    # its edits are additions written as weights: the addition's words
    def summary_lines(self, record: Any) -> list[str]:
        from .addition.method import Addition

        return Addition.summary_lines(self, record)

    def card_formula(self, record: Any) -> str:
        from .addition.method import Addition

        return Addition.card_formula(self, record)

    def gain_text(self, record: Any) -> str:
        from .addition.method import Addition

        return Addition.gain_text(self, record)
