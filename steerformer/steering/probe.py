"""The one room that runs the model for steering: every method, the calibration and the evaluation
read the model's states and distributions through these functions, and no other steering module
places a hook on the model to read it (``activation.py`` adds vectors at run time: that is the
product, not a reading).

* :func:`capture` — one forward pass of the base model (no gradients, no KV cache) recording, per
  execution layer, what a caller asks for: a block's inputs (its positional and keyword arguments,
  for a re-run), a block's output (the residual state after it), the first input of a module inside
  it (a residual writer, an attention module); the forward stops right after the last thing asked
  for. Blocks that run at several layers (ALBERT) are counted in call order.
* :class:`BlockCache` — the inputs of the blocks from one layer on, captured once; :meth:`BlockCache.states`
  re-runs them as the model is now (or with some parameters replaced, differentiably), then the
  final norm: an edit at layer ℓ leaves every block below ℓ unchanged, so a trial re-runs blocks
  ℓ… only.
* :class:`AnswerBatch` (answers after prompts) and :class:`KLProbe` (the mean per-token KL of the model
  as it is now against the base model's, on those answers); :func:`kl_per_token`, the one KL formula.

Every hook is removed in a ``finally``: whatever a forward raises, none is left
on the user's model. What a caller hands the room is checked first, before any hook is placed, each
in one line naming the argument (:func:`layer_index`, :func:`submodule`, :func:`check_batch`, and
:meth:`AnswerBatch.of`'s rows): a layer that is a bool or outside the model, a module path the model
does not have, a token id outside its vocabulary, a row longer than its positions, an empty batch,
prompts and answers of different counts, a KL over no answer token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from typing import Any, Iterable, Mapping, Sequence

import torch

from ..adapters.base import config_positions, first_output, hidden_input
from ..errors import bad_argument
from ..prompts import PromptBatch, check_fits


def model_device(model: Any) -> torch.device | None:
    """Where the model's inputs go: the device of its first materialized parameter (None: CPU)."""
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return None


def kl_per_token(base: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """KL(p_base ‖ p) in nats at each position, from log-probabilities (..., vocab) — the one KL of
    steering (the held-out price, the calibration probe, the evaluation, a method's training)."""
    return (base.exp() * (base - logp)).sum(-1)


def no_cache(model: Any) -> dict:
    """The keyword that turns the KV cache off, for a model whose config has one."""
    return {"use_cache": False} if getattr(model.config, "use_cache", None) is not None else {}


# ---- the checks of what a caller hands the room ---------------------------------------------------
def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (a numpy or torch integer too), never a bool
    (``True`` is no layer or token 1); None otherwise."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return None
    with contextlib.suppress(TypeError):
        return operator.index(value)
    return None


def layer_index(name: str, value: Any, low: int, high: int, what: str = "execution layers") -> int:
    """``value`` as a layer number in [``low``, ``high``] (:func:`whole_number`); one line naming ``name``
    otherwise."""
    k = whole_number(value)
    if k is None or not low <= k <= high:
        raise bad_argument(name, value, f"{what} in [{low}, {high}] (whole numbers, not bools)")
    return k


def layer_set(name: str, values: Any, n: int) -> set[int]:
    """A collection of execution layers of a model with ``n`` of them, each checked by :func:`layer_index`."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise bad_argument(name, values, f"a list of execution layers in [0, {n - 1}] (the model has {n})")
    return {layer_index(name, k, 0, n - 1, f"execution layers (the model has {n})") for k in values}


def submodule(base: Any, name: str, path: Any) -> torch.nn.Module:
    """The module at ``path`` inside ``base`` (the base model); one line naming ``name`` when there is none."""
    if isinstance(path, str) and path:
        try:
            return base.get_submodule(path)
        except AttributeError:
            pass
    first = next((n for n, _ in base.named_modules() if n.count(".") == 2), None) or \
        next((n for n, _ in base.named_modules() if n), "")
    raise bad_argument(name, path, f"a module path inside the model's {type(base).__name__}, e.g. {first!r}",
                       "List them with [n for n, _ in model.base_model.named_modules()].")


def check_batch(model: Any, batch: PromptBatch, name: str, positions: int | None = None) -> None:
    """The one check of token rows against the model about to read them: at least one row, every id
    (padding included) inside the vocabulary, no row longer than the model's positions (``positions``; by
    default the config's ``max_position_embeddings`` / ``n_positions``). An id outside the table is an
    IndexError deep in the embedding; a row past the positions reads a position table out of range."""
    ids = batch.input_ids
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise bad_argument(name, tuple(ids.shape), "at least one row of at least one token")
    if positions is None:
        positions = config_positions(getattr(model, "config", None))
    check_fits(ids.shape[1], positions, name=name, value=f"a row of {ids.shape[1]} tokens", what="token rows",
               fix="Shorten the longest prompt or answer.")
    try:
        vocab = int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, TypeError):
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        raise bad_argument(name, low if low < 0 else high, f"token ids in [0, {vocab - 1}] (the model's vocabulary, "
                           "padding included)", "Tokenize with the model's own tokenizer; pad with one of its ids.")


# ---- capture -------------------------------------------------------------------------------------
class _Stop(Exception):
    """Raised by a hook once everything asked for is recorded (the rest of the forward is skipped)."""


@dataclasses.dataclass
class Capture:
    """What :func:`capture` recorded: ``inputs[k]`` = (block path, args, kwargs) of execution layer k,
    ``outputs[k]`` = the hidden state after it, ``modules[(k, path)]`` = the first input of module
    ``path`` while layer k ran (all detached, on the model's device)."""

    inputs: dict
    outputs: dict
    modules: dict

    def cache(self, model: Any, adapter: Any, start: int, batch: PromptBatch) -> "BlockCache":
        """The :class:`BlockCache` of layers ``start``… (their inputs must have been captured)."""
        n = len(adapter.layer_sequence())
        return BlockCache(model, adapter, [self.inputs[k] for k in range(start, n)], start, batch)


@torch.no_grad()
def capture(model: Any, adapter: Any, batch: PromptBatch, *, inputs: Iterable[int] = (),
            outputs: Iterable[int] = (), modules: Mapping[int, Sequence[str]] | None = None) -> Capture:
    """One forward pass of ``model``'s base model on ``batch`` recording the block inputs of the
    execution layers ``inputs``, the block outputs of ``outputs`` and, per layer of ``modules``, the
    first input of each module path given (relative to the base model); stopped once all is recorded.
    Layers, module paths and the batch are checked before any hook is placed."""
    seq = adapter.layer_sequence()
    n = len(seq)
    want_in, want_out = layer_set("inputs", inputs, n), layer_set("outputs", outputs, n)
    modules = {} if modules is None else modules
    if not isinstance(modules, Mapping):
        raise bad_argument("modules", modules, "a mapping {execution layer: [module paths]}")
    want_mod = set()
    for k, paths in modules.items():
        k = layer_index("modules", k, 0, n - 1, f"execution layers (the model has {n})")
        if isinstance(paths, (str, bytes)) or not isinstance(paths, Iterable):
            raise bad_argument("modules", paths, "a list of module paths for each layer (a bare string is none)")
        want_mod |= {(k, p) for p in paths}
    asked = want_in | want_out | {k for k, _ in want_mod}
    check_batch(model, batch, "batch", adapter.max_positions)
    base = model.base_model
    names = sorted({adapter.layer_block(s) for s in set(seq)})
    blocks = {n: base.get_submodule(n) for n in names}  # resolved before any hook: a bad path places none
    paths = sorted({p for _, p in want_mod}, key=str)
    inner = {p: submodule(base, "modules", p) for p in paths}
    got = Capture({}, {}, {})
    layer = [-1]  # the execution layer running now (blocks run in execution order)
    total = len(want_in) + len(want_out) + len(want_mod)

    def done() -> None:
        if len(got.inputs) + len(got.outputs) + len(got.modules) == total:
            raise _Stop

    def before(name: str):
        def hook(m, args, kwargs):
            layer[0] += 1
            if layer[0] in want_in:
                got.inputs[layer[0]] = (name, args, dict(kwargs))
                done()
        return hook

    def after(m, args, out):
        if layer[0] in want_out:
            got.outputs[layer[0]] = first_output(out).detach()
            done()

    def reading(path: str):
        def hook(m, args, kwargs):
            if (layer[0], path) in want_mod:
                got.modules[(layer[0], path)] = hidden_input(args, kwargs).detach()
                done()
        return hook

    handles = []
    try:
        for n, block in blocks.items():
            handles.append(block.register_forward_pre_hook(before(n), with_kwargs=True))
            handles.append(block.register_forward_hook(after))
        for p, m in inner.items():
            handles.append(m.register_forward_pre_hook(reading(p), with_kwargs=True))
        base(**batch.to(model_device(model)).inputs(), **no_cache(model))
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    if len(got.inputs) + len(got.outputs) + len(got.modules) < total:
        raise RuntimeError(f"expected {max(asked) + 1} block calls, saw {layer[0] + 1}: adapter.layer_block is "
                           f"wrong for {type(model).__name__}")
    return got


# ---- re-runs from cached block inputs ---------------------------------------------------------------
@dataclasses.dataclass
class BlockCache:
    """The inputs (path, args, kwargs) of execution layers ``start``… on one ``batch``, captured once."""

    model: Any
    adapter: Any
    calls: list
    start: int
    batch: PromptBatch

    @classmethod
    def of(cls, model: Any, adapter: Any, batch: PromptBatch, start: int = 0) -> "BlockCache":
        """The cache of layers ``start``… of ``batch`` (one forward pass, stopped at the last block)."""
        n = len(adapter.layer_sequence())
        start = layer_index("start", start, 0, n - 1, f"execution layers (the model has {n})")
        return capture(model, adapter, batch, inputs=range(start, n)).cache(model, adapter, start, batch)

    def layer(self, name: str, value: Any) -> int:
        """``value`` checked as one of the cache's execution layers (``start``… the last)."""
        return layer_index(name, value, self.start, self.start + len(self.calls) - 1,
                           f"execution layers this cache holds (it starts at layer {self.start})")

    def states(self, start: int | None = None, params: Mapping[str, torch.Tensor] | None = None,
               keep: Iterable[int] = ()) -> tuple[torch.Tensor, dict]:
        """(the final hidden states after the final norm, {layer: the state after it} for ``keep``):
        blocks ``start``… (default: the cache's first) re-run as the model is now; ``params`` replaces
        parameters of the blocks (paths relative to the base model) without touching the model,
        differentiably (``torch.func.functional_call``)."""
        start = self.start if start is None else self.layer("start", start)
        base = self.model.base_model
        keep = set(keep)
        h, kept = None, {}
        for k, (name, args, kwargs) in enumerate(self.calls[start - self.start:], start=start):
            if h is not None:  # the previous block's output in place of the cached hidden state
                args, kwargs = ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})
            block = base.get_submodule(name)
            if params:
                local = {p[len(name) + 1:]: v for p, v in params.items() if p.startswith(name + ".")}
                out = torch.func.functional_call(block, local, args, kwargs)
            else:
                out = block(*args, **kwargs)
            h = first_output(out)
            if k in keep:
                kept[k] = h
        norm = self.adapter.final_norm(base)
        return (norm(h) if norm is not None else h), kept

    def logprobs(self, select: torch.Tensor, start: int | None = None, params: Mapping[str, torch.Tensor] | None = None,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """log p at the ``select``ed positions (N, vocab), the model as it is now, blocks ``start``… re-run."""
        h = self.states(start, params)[0]
        return torch.log_softmax(self.model.get_output_embeddings()(h[select.to(h.device)]).to(dtype), -1)

    @torch.no_grad()
    def module_input(self, layer: int, path: str) -> torch.Tensor:
        """The first input of module ``path`` while block ``layer`` re-runs from its cached inputs."""
        name, args, kwargs = self.calls[self.layer("layer", layer) - self.start]
        base = self.model.base_model
        seen: list = []
        handle = submodule(base, "path", path).register_forward_pre_hook(lambda m, a: seen.append(a[0].detach()))
        try:
            base.get_submodule(name)(*args, **kwargs)
        finally:
            handle.remove()
        return seen[0]

    def block_output(self, layer: int) -> torch.Tensor:
        """The state after execution layer ``layer``: the next block's cached input, else the block re-run."""
        layer = self.layer("layer", layer)
        if layer + 1 - self.start < len(self.calls):
            _, args, kwargs = self.calls[layer + 1 - self.start]
            return hidden_input(args, kwargs)
        name, args, kwargs = self.calls[layer - self.start]
        return first_output(self.model.base_model.get_submodule(name)(*args, **kwargs))


# ---- answers after prompts ---------------------------------------------------------------------------
@dataclasses.dataclass
class AnswerBatch:
    """Prompt + answer rows right-padded, and ``select`` (B, n): the positions whose next-token
    distribution predicts an answer token (the last prompt token … the answer's second-to-last);
    ``row`` (N,): the row of each selected position, in the order ``tensor[select]`` gives them."""

    batch: PromptBatch
    select: torch.Tensor
    row: torch.Tensor
    lengths: list

    @classmethod
    def of(cls, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], *, pad: int = 0,
           device: Any = None) -> "AnswerBatch":
        """The batch of each prompt followed by its answer. At least one prompt, as many answers as prompts,
        every prompt at least one token (its last token predicts the answer's first), token ids whole
        numbers >= 0; an answer may be empty (it selects nothing)."""
        prompts, answers = cls.token_rows("prompts", prompts), cls.token_rows("answers", answers)
        if not prompts:
            raise bad_argument("prompts", prompts, "at least one prompt (token ids)")
        if len(answers) != len(prompts):
            raise bad_argument("answers", f"{len(answers)} answers", f"one answer per prompt ({len(prompts)} prompts)",
                               "Pass an empty answer for a prompt that has none.")
        empty = next((i for i, p in enumerate(prompts) if not p), None)
        if empty is not None:
            raise bad_argument("prompts", f"prompt {empty} of no token", "prompts of at least one token (the last "
                               "prompt token predicts the answer's first)")
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise bad_argument("pad", pad, "a token id, a whole number >= 0")
        batch = PromptBatch.from_rows([p + a for p, a in zip(prompts, answers)], pad_id=pad).to(device)
        select = torch.zeros_like(batch.attention_mask, dtype=torch.bool)
        row = []
        for i, (p, a) in enumerate(zip(prompts, answers)):
            select[i, len(p) - 1:len(p) - 1 + len(a)] = True
            row += [i] * len(a)
        return cls(batch, select, torch.tensor(row, dtype=torch.long, device=device), [len(a) for a in answers])

    @staticmethod
    def token_rows(name: str, rows: Any) -> list[list[int]]:
        """``rows`` as lists of token ids (whole numbers >= 0, not bools); one line naming ``name`` otherwise."""
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
            raise bad_argument(name, rows, "a list of token id lists")
        out = []
        for i, r in enumerate(rows):
            if isinstance(r, (str, bytes)) or not isinstance(r, Iterable):
                raise bad_argument(name, r, f"a list of token id lists (row {i} is no list of ids)",
                                   "Tokenize the text first.")
            row = []
            for t in r:
                k = whole_number(t)
                if k is None or k < 0:
                    raise bad_argument(name, t, f"token ids, whole numbers >= 0 (row {i} holds {t!r:.20})")
                row.append(k)
            out.append(row)
        return out

    @torch.no_grad()
    def logprobs(self, model: Any) -> torch.Tensor:
        """log p at the selected positions (N, vocab) float64 on the CPU: one full forward pass."""
        check_batch(model, self.batch, "answers")
        logits = model(**self.batch.inputs(), **no_cache(model)).logits
        return torch.log_softmax(logits[self.select.to(logits.device)].to(torch.float64), -1).cpu()

    def per_answer(self, logprobs: torch.Tensor) -> list[torch.Tensor]:
        """``logprobs`` of the selected positions split into one (len(answer), vocab) tensor per answer."""
        return list(torch.split(logprobs, self.lengths))


@dataclasses.dataclass
class KLProbe:
    """An :class:`AnswerBatch` with the base model's log-probabilities at its selected positions
    (float64, CPU) and, for re-runs from a layer, the blocks' inputs (``cache``)."""

    answers: AnswerBatch
    base_logprobs: torch.Tensor
    cache: BlockCache | None = None
    texts: list[str] | None = None  # the prompts' texts (None: token ids only)
    kind: str = ""  # what the KL is taken on, in words (for the record)

    @classmethod
    def of(cls, model: Any, adapter: Any, answers: AnswerBatch, *, cached: bool = False) -> "KLProbe":
        """The base model measured now; ``cached``: every block's inputs kept, and the base
        log-probabilities re-run from them (what every later re-run is compared with)."""
        if not isinstance(answers, AnswerBatch):
            raise bad_argument("answers", type(answers).__name__, "an AnswerBatch (AnswerBatch.of(prompts, answers))")
        if not bool(answers.select.any()):
            raise bad_argument("answers", f"{len(answers.lengths)} empty answers", "at least one answer token (the KL "
                               "is a mean over answer tokens: over none it is undefined)")
        check_batch(model, answers.batch, "answers", adapter.max_positions)
        if not cached:
            return cls(answers, answers.logprobs(model))
        probe = cls(answers, torch.empty(0), BlockCache.of(model, adapter, answers.batch, 0))
        probe.base_logprobs = probe.rerun(0)
        return probe

    @property
    def select(self) -> torch.Tensor:
        return self.answers.select

    @property
    def batch(self) -> PromptBatch:
        return self.answers.batch

    @torch.no_grad()
    def rerun(self, start: int) -> torch.Tensor:
        """log p at the selected positions, the model as it is now, blocks ``start``… re-run from the cache."""
        if self.cache is None:
            raise bad_argument("start", start, "a re-run of a probe that keeps the blocks' inputs",
                               "Make the probe with KLProbe.of(..., cached=True), or measure with kl_of(model).")
        return self.cache.logprobs(self.select, start).cpu()

    def kl(self, logprobs: torch.Tensor) -> float:
        """Mean over the selected tokens of KL(p_base ‖ p), nats."""
        shape = tuple(self.base_logprobs.shape)
        if not isinstance(logprobs, torch.Tensor) or tuple(logprobs.shape) != shape:
            raise bad_argument("logprobs", tuple(getattr(logprobs, "shape", ())) or type(logprobs).__name__,
                               f"log-probabilities of shape {shape} (one row per selected answer token, as rerun() "
                               "or AnswerBatch.logprobs() give them)")
        return float(kl_per_token(self.base_logprobs, logprobs).mean())

    def kl_of(self, model: Any) -> float:
        """The mean KL of ``model`` as it is now, from one full forward pass (any edit counts)."""
        return self.kl(self.answers.logprobs(model))


__all__ = ["AnswerBatch", "BlockCache", "Capture", "KLProbe", "capture", "check_batch", "kl_per_token", "layer_index",
           "layer_set", "model_device", "no_cache", "submodule", "whole_number"]
