"""``collapse()``: run prompts through a model looped many times and measure consensus (docs/math.md §6)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import time
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..configs import WEIGHTS, CollapseConfig, progress_bar, torch_dtype, with_options  # noqa: F401  (WEIGHTS re-exported)
from ..errors import InvalidArgumentError, NonFiniteStateError, bad_argument
from ..loading import is_pretrained_model, load_model, load_tokenizer, model_display_name
from ..resources import check_fits
from ..version import __version__
from .loop import LoopedModel
from .metrics import consensus_stats
from .prompts import check_length, check_token_ids, random_prompt_ids, tokenize_texts
from .result import STATS, CollapseResult
from .store import RUN_FILE, RunStore
from .weights import ffn_modules, pass_seed, reinitialize

log = logging.getLogger(__name__)


def _prepare_model(model_or_path: Any, dtype: torch.dtype | None, device: Any, own: bool):
    """The model to loop, in eval mode. A model object is copied before anything would change it
    (dtype, device, or weights when ``own``), so the caller's model is left as it was."""
    if not is_pretrained_model(model_or_path):
        return load_model(model_or_path, dtype=dtype, device=device)
    model = model_or_path
    p = next(model.parameters())
    dev = None if device is None else torch.device(device)
    moves = (dtype is not None and dtype != p.dtype) or (
        dev is not None and (dev.type != p.device.type or dev.index not in (None, p.device.index)))
    if own or moves or model.training:
        model = copy.deepcopy(model)
    if moves:
        model = model.to(dtype=dtype, device=dev)
    return model.eval()


def collapse(model: Any = None, config: CollapseConfig | None = None, *, device: Any = None, token_ids: Any = None,
             texts: Sequence[str] | None = None, tokenizer: Any = None, out: str | os.PathLike | None = None,
             resume: bool = False, progress: bool = False,
             on_pass: Callable[[int, dict[str, np.ndarray]], None] | None = None, **options: Any) -> CollapseResult:
    """Loop ``model`` ``passes`` times over the same prompts and measure E (eq. 9), the
    mean pairwise cosine and the mean distance to the centroid after every block.

    Options come as a :class:`~steerformer.configs.CollapseConfig` or as its fields by keyword
    (``n_prompts=100, length=200, passes=10, ffn=True, weights="pretrained", seed=42, dtype=None,
    batch_size=None, early_stop_tol=None, e_precision="float64"``).

    The prompts (``n_prompts × length`` ids uniform over the vocabulary, Python ``random`` seeded
    with ``seed`` as the reference code; or ``token_ids``; or ``texts``) are embedded once. Each
    pass runs every block in execution order with the model's own masks, then the final norm; its
    output is the next pass's input (positions are not re-added). ``ffn=False`` drops every FFN
    with its norm and its residual. ``weights``: ``"pretrained"``; ``"random"`` (one draw of the
    model's own initializer, seed ``seed``); ``"random-per-pass"`` (a fresh draw before every
    pass, seed ``seed + pass``). With ``out``, every pass is appended to that folder as it
    completes, so Ctrl-C keeps the finished passes and ``resume=True`` continues bit for bit (the
    stored config must match, except ``passes`` and ``early_stop_tol``).
    ``early_stop_tol``: stop after a pass in which E stayed below it for every prompt and block.
    ``on_pass(index, arrays)`` is called after each stored pass. ``e_precision``: ``"float64"``
    (default, accurate down to 1e-10 and below) or ``"states"`` (the reference code's arithmetic in
    the states' dtype, to reproduce the paper's fp16 curves; see :mod:`.metrics`).
    """
    model_or_path = model
    if model_or_path is None:
        raise bad_argument("model", None, "a model object, a checkpoint folder or a Hub id")
    cfg = with_options(config, CollapseConfig, options, "collapse")
    passes, ffn, weights, seed, dtype = cfg.passes, cfg.ffn, cfg.weights, cfg.seed, cfg.dtype
    batch_size, early_stop_tol, e_precision = cfg.batch_size, cfg.early_stop_tol, cfg.e_precision
    if sum(x is not None for x in (token_ids, texts)) > 1:
        raise InvalidArgumentError("pass token_ids= or texts=, not both")
    if resume and out is None:
        raise bad_argument("resume", resume, "resume=True together with out= (the folder of the run to continue)")
    run_precision = torch_dtype(dtype)
    inputs = [model_or_path] if isinstance(model_or_path, (str, os.PathLike)) else []
    with contextlib.ExitStack() as held:  # the run folder's writer lock, held to the end of the run
        store = RunStore.open(out, resume=resume, inputs=inputs, held=held) if out is not None else None  # before loading

        model = _prepare_model(model_or_path, run_precision, device, own=weights != "pretrained")
        looped = LoopedModel(model, ffn=ffn)
        adapter = looped.adapter
        param = next(model.parameters())
        dev, run_dtype = param.device, param.dtype

        def check_memory(P: int, T: int) -> None:
            _check_memory(P, T, cfg, looped.n_blocks, adapter, run_dtype.itemsize, random=source_is_random)

        source_is_random = token_ids is None and texts is None
        if token_ids is not None:
            ids, source = check_token_ids(token_ids, vocab_size=adapter.vocab_size, max_positions=adapter.max_positions), "token_ids"
        elif texts is not None:
            tok = load_tokenizer(model_or_path, tokenizer)
            ids, source = tokenize_texts(texts, tok, max_positions=adapter.max_positions), "texts"
        else:
            check_length(cfg.length, adapter.max_positions)
            check_memory(int(cfg.n_prompts), int(cfg.length))  # before the prompts are drawn
            ids, source = random_prompt_ids(int(cfg.n_prompts), int(cfg.length), adapter.vocab_size, seed=int(seed)), "random"
        P, T = ids.shape
        check_memory(P, T)
        bs = P if batch_size is None else min(batch_size, P)
        slices = [slice(i, min(i + bs, P)) for i in range(0, P, bs)]

        # The result stores its config as run: the prompts' actual count and length, the resolved
        # precision and batch size, plus where the tokens came from.
        run_cfg = dataclasses.replace(cfg, n_prompts=P, length=T, ffn=bool(ffn), seed=int(seed), batch_size=bs,
                                      dtype=str(run_dtype).removeprefix("torch."))
        options = {**run_cfg.to_dict(), "token_source": source}
        meta = _model_meta(model_or_path, model, adapter, looped, dev)

        start, h, emb = 0, None, None
        if store is not None and resume:
            verified = store.verify(prompts=P, length=T, dtype=options["dtype"])  # every stored piece vs run.json
            old = store.read_run()
            try:  # runs before e_precision existed: its default
                stored = CollapseConfig.from_dict(old["options"])
            except InvalidArgumentError as exc:  # a value of the file, not of the user's flags: named as such
                why = str(exc).split(" is invalid: ", 1)[-1].rstrip(".")
                raise store.corrupt(RUN_FILE, f"has a bad options.{getattr(exc, 'argument', None) or '?'} "
                                    f"({why})") from None
            diff = stored.differences(run_cfg, resume_only=True)
            if old["options"].get("token_source") != source:
                diff["token_source"] = (old["options"].get("token_source"), source)
            for k in ("model_type", "n_blocks", "d_model"):
                if old["meta"].get(k) != meta[k]:
                    diff[k] = (old["meta"].get(k), meta[k])
            if diff:
                raise bad_argument("resume", True, "the same options and model as the run being resumed; these differ "
                                   "(stored, now): " + ", ".join(f"{k}={a!r}/{b!r}" for k, (a, b) in diff.items()),
                                   "Resume with the original options, or start a new run in another folder.")
            if not np.array_equal(store.read_prompts(), ids):
                raise bad_argument("resume", True, "the prompts of the run being resumed (the token ids differ)")
            state = store.load_state() if verified > 0 else None
            if state is not None:
                start, h, emb = int(state["completed"]), state["hidden"].to(dev), store.read_embedding()
                log.info("resuming %s after pass %d", store.path, start)

        # The first draw of random weights comes before the embedding, as in the reference code.
        if weights != "pretrained" and not (weights == "random-per-pass" and start > 0):
            reinitialize(model, pass_seed(seed, 0))
        if h is None:
            h = torch.cat([looped.embed(torch.as_tensor(ids[s], device=dev)) for s in slices])
            if not bool(h.any()):  # E normalizes every state: 0/0 everywhere, a run of NaN and a figure that fails
                raise bad_argument("model", meta["model_id"],
                                   "a model whose embedded prompts are not all zero (every embedded state is 0: "
                                   "E of eq. (9) normalizes each state, so nothing can be measured)",
                                   "Check that the checkpoint's weights are not all zero, or use --weights random.")
            emb = {k: v.cpu().numpy() for k, v in zip(STATS, consensus_stats(h, e_precision))}
            if store is not None:
                store.write_run({"options": options, "meta": meta})
                store.write_prompts(ids)
                store.write_embedding(emb)
        elif store is not None:
            store.write_run({"options": options, "meta": meta})

        # Every buffer that lives through the run is allocated here, once: small long-lived arrays
        # allocated between each pass's large temporaries fragment the CPU heap, and the resident
        # memory then creeps up pass after pass.
        L = looped.n_blocks
        buf = {k: np.zeros((passes, L, P)) for k in STATS}
        if store is not None and start > 0:
            for k, v in store.read_passes(start).items():
                if k in buf:
                    buf[k][:start] = v[:passes]
        on_dev = torch.empty((len(STATS), L, P), dtype=torch.float64 if h.dtype == torch.float64 else torch.float32,
                             device=dev)
        done = min(start, passes)
        stopped_early = False
        bar = progress_bar(progress, "collapse", total=(passes - start) * looped.n_blocks * len(slices), unit="block")
        try:
            for p in range(start, passes):
                t0 = time.perf_counter()
                if weights == "random-per-pass" and p > 0:
                    # Without FFN the reference re-draws a model whose MLPs are already swapped out.
                    reinitialize(model, pass_seed(seed, p), without=None if ffn else ffn_modules(looped))
                for s in slices:
                    def on_block(k: int, hk: torch.Tensor, s: slice = s) -> None:
                        on_dev[:, k, s] = torch.stack(consensus_stats(hk, e_precision))
                        bar.update(1)

                    if len(slices) == 1:
                        h = looped.run_pass(h, on_block)
                    else:
                        h[s] = looped.run_pass(h[s], on_block)
                for i, k in enumerate(STATS):
                    buf[k][p] = on_dev[i].cpu().numpy()
                arrays = {k: buf[k][p] for k in STATS}
                if not bool(torch.isfinite(h).all()):
                    raise NonFiniteStateError(f"hidden states became NaN/inf during pass {p + 1} in {options['dtype']}: "
                                              "rerun with dtype='fp32' (--dtype fp32) or 'bf16'.")
                seconds = time.perf_counter() - t0
                if store is not None:
                    store.append_pass(p, {**arrays, "seconds": np.float64(seconds)})
                    store.save_state(p + 1, h)
                done = p + 1
                if on_pass is not None:
                    on_pass(p, arrays)
                if early_stop_tol is not None and float(arrays["e"].max()) < early_stop_tol:
                    stopped_early = True
                    log.info("E < %g at every block of pass %d for every prompt: stopping", early_stop_tol, p + 1)
                    break
        except KeyboardInterrupt:
            if store is not None and done > 0:
                store.save_result(_finish(buf, done, emb, ids, options, meta, weights, seed, stopped_early, partial=True))
                log.warning("interrupted: %d completed passes kept in %s (resume=True continues)", done, store.path)
            raise
        finally:
            bar.close()
        result = _finish(buf, done, emb, ids, options, meta, weights, seed, stopped_early, partial=False)
        if store is not None:
            store.save_result(result)
        return result


def _check_memory(P: int, T: int, cfg: CollapseConfig, L: int, adapter: Any, itemsize: int, *, random: bool) -> None:
    """Refuse a run whose arrays cannot fit in memory, before any is allocated, naming the count that
    makes it large: the prompt ids and hidden states (P × T × d, twice while embedding), one batch's
    attention scores and FFN activations, and the per-block statistics of every pass (3 × passes ×
    L × P float64, twice: the buffer and the result)."""
    bs = P if cfg.batch_size is None else min(cfg.batch_size, P)
    states = 8 * P * T + 2 * P * T * adapter.d_model * itemsize
    batch = 2 * bs * T * (T * adapter.n_heads + 4 * adapter.d_model) * itemsize
    stats = 2 * len(STATS) * cfg.passes * L * P * 8
    need = states + batch + stats
    if stats >= max(states, batch):
        check_fits(need, "passes", cfg.passes, f"{cfg.passes:,} passes × {L} blocks × {P:,} prompts of statistics")
    elif batch > states and cfg.batch_size is not None:
        check_fits(need, "batch_size", cfg.batch_size, f"batches of {bs:,} prompts × {T} tokens")
    else:
        name, value = ("n_prompts", cfg.n_prompts) if random else ("token_ids", f"{P} prompts")
        check_fits(need, name, value, f"{P:,} prompts × {T} tokens × d={adapter.d_model}")


def _finish(buf, n, emb, ids, options, meta, weights, seed, stopped_early, *, partial) -> CollapseResult:
    seeds = {"pretrained": [], "random": [pass_seed(seed, 0)],
             "random-per-pass": [pass_seed(seed, p) for p in range(n)]}[weights]
    meta = {**meta, "passes_run": n, "stopped_early": stopped_early, "partial": partial, "weight_seeds": seeds}
    return CollapseResult(**{k: buf[k][:n].copy() for k in STATS}, **{f"{k}0": emb[k] for k in STATS},
                          token_ids=ids, options=options, meta=meta)


def _model_meta(model_or_path, model, adapter, looped: LoopedModel, dev) -> dict:
    import transformers

    name = model_or_path if isinstance(model_or_path, (str, os.PathLike)) else \
        (getattr(model.config, "_name_or_path", "") or type(model).__name__)
    return {"model_id": model_display_name(name), "model_type": adapter.model_type, "n_blocks": looped.n_blocks,
            "d_model": adapter.d_model, "n_heads": adapter.n_heads,
            "masks": [adapter.mask(k).to_dict() for k in range(looped.n_blocks)],
            "final_norm": looped.norm is not None, "device": str(dev),
            "steerformer_version": __version__, "transformers": transformers.__version__, "torch": torch.__version__,
            "e_definition": "eq. (9), signed (no absolute value), as the reference code computes it: "
                            "1 - (y1[0] @ y1.T).mean() in GPTConsensus.py"}
