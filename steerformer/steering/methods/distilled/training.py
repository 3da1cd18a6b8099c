"""Training the distilled edit: ΔW = U A (U: out × k, A: k × in) of the writer of each edited layer,
the writer's weight replaced by W + U A in the probe room's re-run (``probe.BlockCache.states`` with
``params``: differentiable in U and A, the model itself untouched), so that the model *without* the
instruction reproduces the instructed teacher on the teacher's answers.

Per step, on one batch of examples (the student sees the question alone, then the teacher's answer):

* ``kl`` (Prompt Baking): mean over the answer tokens of KL(p_teacher ‖ p_student) of the next-token
  distributions, the teacher's read once from the instructed prompt;
* ``states`` (PSR-style): mean over the later layers ℓ of ‖h_student − h_teacher‖² / ‖h_teacher‖² at
  the same answer positions (the state after layer ℓ);
* plus ``kl_weight`` × KL(p_base ‖ p_student) over the base model's own answers (neutral text).

Gradients flow only from the first edited layer on: the blocks below run once per batch (the probe
room's cached block inputs). The model's parameters get their ``requires_grad`` back on every exit.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Mapping, Sequence

import torch

from ....configs import progress_bar
from ....errors import bad_argument
from ...edit import Edit
from ...probe import AnswerBatch, BlockCache, kl_per_token
from .teacher import Example

#: at most this many later layers carry the ``states`` objective (evenly spaced, the last included)
STATE_LAYERS = 4


def edit_writers(adapter: Any, layers: Sequence[int], writer: str, model_id: str) -> dict[int, Any]:
    """{layer: Writer}: the MLP's output projection (``Adapter.last_writer``: refused with one line on a
    post-LN or weight-sharing model) or the attention's output, of each layer."""
    seq = adapter.layer_sequence()
    out = {}
    for k in layers:
        if writer == "mlp":
            out[k] = adapter.last_writer(k, model_id)
        else:
            att = [w for w in adapter.block_writers(seq[k]) if w.kind == "attention"]
            if not att or att[0].norm is not None:
                raise bad_argument("writer", writer, "'mlp' for this model (its attention output is normalized or "
                                   "undeclared)")
            out[k] = att[0]
    return out


def state_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """The layers whose states the ``states`` objective matches: from the last edited one to the
    last layer, at most :data:`STATE_LAYERS`, evenly spaced, the last layer included."""
    span = list(range(max(layers), n_layers))
    if len(span) <= STATE_LAYERS:
        return span
    step = (len(span) - 1) / (STATE_LAYERS - 1)
    return sorted({span[round(i * step)] for i in range(STATE_LAYERS)})


@dataclasses.dataclass
class Answers:
    """One batch of prompt + answer rows, the blocks' inputs cached from the first edited layer."""

    cache: BlockCache
    rows: AnswerBatch

    @classmethod
    def of(cls, model: Any, adapter: Any, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]],
           start: int, pad: int, device: Any) -> "Answers":
        rows = AnswerBatch.of(prompts, answers, pad=pad, device=device)
        return cls(BlockCache.of(model, adapter, rows.batch, start), rows)

    def run(self, keep: Sequence[int] = (), params: Mapping[str, torch.Tensor] | None = None
            ) -> tuple[torch.Tensor, dict]:
        """(log p at the answer positions (N, vocab) float32, {layer: the state after it there} for
        ``keep``): the cached blocks re-run with ``params`` in place of the model's."""
        h, kept = self.cache.states(params=params, keep=keep)
        select = self.rows.select
        return self.cache.head_logprobs(h, select, torch.float32), {k: v[select] for k, v in kept.items()}


def lora_params(model: Any, writers: Mapping[int, Any], U: Mapping[int, torch.Tensor],
                A: Mapping[int, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{stored weight: W + U A} of each edited writer (in its stored layout): the LoRA forward as weights."""
    base = model.base_model
    out = {}
    for k, w in writers.items():
        delta = U[k] @ A[k]
        out[w.weight] = base.get_parameter(w.weight) + (delta.T if w.transposed else delta)
    return out


@dataclasses.dataclass
class TrainBatch:
    """One fixed batch: the student's rows cached from the first edited layer, the teacher's targets
    at the same answer positions, and the neutral rows with the base model's distributions."""

    student: Answers
    teacher_logprobs: torch.Tensor  # (N, vocab)
    teacher_states: dict  # {layer: (N, d)}
    neutral: Answers | None = None
    base_logprobs: torch.Tensor | None = None


@torch.no_grad()
def make_batch(model: Any, adapter: Any, examples: Sequence[Example], start: int, keep: Sequence[int], pad: int,
               device: Any, neutral: bool) -> TrainBatch:
    answers = [e.answer for e in examples]
    t_lp, t_states = Answers.of(model, adapter, [e.teacher for e in examples], answers, start, pad, device).run(keep)
    student = Answers.of(model, adapter, [e.student for e in examples], answers, start, pad, device)
    out = TrainBatch(student=student, teacher_logprobs=t_lp, teacher_states=t_states)
    rows = [e for e in examples if e.neutral]
    if neutral and rows:
        out.neutral = Answers.of(model, adapter, [e.student for e in rows], [e.neutral for e in rows], start, pad,
                                 device)
        out.base_logprobs, _ = out.neutral.run()
    return out


def train_edit(model: Any, adapter: Any, examples: Sequence[Example], *, layers: Sequence[int], writers: Mapping[int, Any],
               rank: int = 4, steps: int = 40, lr: float = 0.01, batch_size: int = 8, kl_weight: float = 1.0,
               objective: str = "kl", seed: int = 0, pad: int = 0, device: Any = "cpu",
               progress: Any = True) -> tuple[list[Edit], dict]:
    """Train the edit (module docstring) and return it as plain :class:`Edit` values (gain 1.0: the
    learned ΔW itself; not applied) and what the record keeps (losses, seconds)."""
    t0 = time.perf_counter()
    layers = sorted(int(k) for k in layers)
    n_layers = len(adapter.layer_sequence())
    keep = state_layers(layers, n_layers) if "states" in objective else []
    gen = torch.Generator().manual_seed(int(seed))
    base = model.base_model
    frozen = [p for p in model.parameters() if p.requires_grad]
    U, A = {}, {}
    for k, w in writers.items():
        W = base.get_parameter(w.weight)
        out_dim, in_dim = (W.shape[1], W.shape[0]) if w.transposed else (W.shape[0], W.shape[1])
        U[k] = torch.zeros(out_dim, rank, device=device, dtype=torch.float32, requires_grad=True)
        A[k] = (torch.randn(rank, in_dim, generator=gen) / in_dim ** 0.5).to(device).requires_grad_(True)
    history: list[dict] = []
    try:
        for p in frozen:
            p.requires_grad_(False)
        order = torch.randperm(len(examples), generator=gen).tolist()
        chunks = [[examples[i] for i in order[j:j + batch_size]] for j in range(0, len(order), batch_size)]
        bar = progress_bar(progress, "distilled: caching the teacher's targets", total=len(chunks))
        batches = []
        for c in chunks:
            batches.append(make_batch(model, adapter, c, layers[0], keep, pad, device, kl_weight > 0))
            bar.update(1)
        bar.close()
        t_cache = time.perf_counter() - t0
        opt = torch.optim.Adam([*U.values(), *A.values()], lr=lr)
        bar = progress_bar(progress, "distilled: training the edit", total=steps)
        for step in range(steps):
            b = batches[step % len(batches)]
            params = lora_params(model, writers, U, A)
            lp, states = b.student.run(keep, params)
            parts: dict[str, torch.Tensor] = {}
            if "kl" in objective.split("+"):
                parts["kl"] = kl_per_token(b.teacher_logprobs, lp).mean()
            if "states" in objective:
                parts["states"] = sum(((states[k] - t).pow(2).sum(-1).mean() / t.pow(2).sum(-1).mean())
                                      for k, t in b.teacher_states.items()) / max(len(keep), 1)
            if b.neutral is not None:
                lp_n, _ = b.neutral.run((), params)
                parts["neutral_kl"] = kl_per_token(b.base_logprobs, lp_n).mean()
            loss = sum(kl_weight * v if n == "neutral_kl" else v for n, v in parts.items())
            if not torch.isfinite(loss):
                raise bad_argument("lr", lr, "a learning rate at which training stays finite (the loss became "
                                   f"{float(loss)} at step {step})", "Lower lr.")
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
    edits = as_edits(adapter, writers, U, A, objective=objective, rank=rank)
    info = {"history": history, "state_layers": keep, "seconds_cache": t_cache,
            "seconds_train": time.perf_counter() - t0 - t_cache}
    return edits, info


def as_edits(adapter: Any, writers: Mapping[int, Any], U: Mapping[int, torch.Tensor], A: Mapping[int, torch.Tensor],
             *, objective: str, rank: int) -> list[Edit]:
    """ΔW = U A of each layer as an :class:`Edit` (u: unit columns, a: the rows times the norms;
    gain 1.0), kind ``"lora"``: a token-dependent low-rank change (not a fixed added vector)."""
    seq = adapter.layer_sequence()
    edits = []
    for k, w in writers.items():
        u = U[k].detach().to(torch.float64).cpu()
        a = A[k].detach().to(torch.float64).cpu()
        norms = torch.linalg.vector_norm(u, dim=0)
        live = norms > 0
        u, a = u[:, live] / norms[live], a[live] * norms[live][:, None]
        if u.shape[1] == 0:  # nothing learned: a zero edit of rank 1
            u, a = torch.zeros(U[k].shape[0], 1, dtype=torch.float64), torch.zeros(1, A[k].shape[1], dtype=torch.float64)
        if u.shape[1] == 1:
            u, a = u[:, 0], a[0]
        where = {"mlp": "MLP output", "attention": "attention output"}[w.kind]
        edits.append(Edit(module=w.weight, layer=k, slot=seq[k], u=u, a=a, gain=1.0, kind="lora", writer=w.kind,
                          transposed=w.transposed, w=None,
                          solve={"method": "distilled", "objective": objective, "rank": rank,
                                 "formula": f"W' = W + γ U A (the {where}, `{w.weight}`, rank ≤ {rank}): adds "
                                            "γ U (A z) for each token's input z, learned so that the unprompted "
                                            "model imitates the instructed one"}))
    return edits


def scaled(edits: Sequence[Edit], gain: float) -> list[Edit]:
    """Copies of ``edits`` with their gain multiplied by ``gain`` (the strength: a scale on ΔW)."""
    if not (isinstance(gain, (int, float)) and math.isfinite(gain)):
        raise bad_argument("gain", gain, "a finite number")
    return [Edit.from_dict({**e.to_dict(), "gain": e.gain * float(gain)}) for e in edits]


__all__ = ["Answers", "STATE_LAYERS", "TrainBatch", "as_edits", "edit_writers", "lora_params", "make_batch", "scaled",
           "state_layers", "train_edit"]
