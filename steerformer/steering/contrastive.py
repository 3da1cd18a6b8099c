"""Contrastive directions (activation addition / representation engineering, MATH.md §5b).

From positive and negative prompts p_i⁺, p_i⁻, with h(p) the hidden state *after* execution layer
ℓ (the output of block ℓ, before any final norm) reduced over the prompt's tokens:

    mean-diff:  u = N(mean_i h(p_i⁺) − mean_j h(p_j⁻))
    pca:        u = first right singular vector of the stacked d_i = h(p_i⁺) − h(p_i⁻),
                sign chosen so that mean_i ⟨d_i, u⟩ > 0   (needs pairs: as many positives as negatives)

Token reduction: the last real token when layer ℓ attends causally (it has seen the whole prompt),
the mean over real tokens when it attends fully (encoders). Which one comes from the adapter's
declared mask of layer ℓ, never from the model's type; ``token=`` overrides it.

The result is a :class:`ContrastiveDirection`: the unit vector plus where it came from (method,
layer, reduction, sha256 of each prompt list); ``steer(model, direction)`` records that source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import torch

from ..errors import bad_argument
from ..loading import load_model, load_tokenizer, open_source
from ..matrices import select_layers
from .direction import DirectionSource, check_vector, vector_hash
from .measure import run_hooked
from .prompts import encode

METHODS = ("mean-diff", "pca")
TOKENS = ("auto", "last", "mean")


@dataclasses.dataclass
class ContrastiveDirection:
    """A unit direction (float64, d_model) extracted from contrasting prompts, with its provenance."""

    vector: torch.Tensor
    method: str
    layer: int
    token: str  # "last" | "mean": how a prompt's states were reduced
    n_positive: int
    n_negative: int
    positive_sha256: str
    negative_sha256: str
    raw_norm: float  # ‖mean difference‖ (mean-diff) or the top singular value / √n (pca), before normalizing
    explained: float | None = None  # pca: share of Σσ² in the first component
    pairs_file: str | None = None

    @property
    def direction_source(self) -> DirectionSource:
        detail = {k: v for k, v in dataclasses.asdict(self).items() if k != "vector"}
        detail["sha256"] = vector_hash(self.vector)
        return DirectionSource("contrastive", detail)

    def __array__(self, dtype=None, copy=None):
        a = self.vector.numpy()
        return a if dtype is None else a.astype(dtype)

    def to_dict(self) -> dict:
        return {"vector": self.vector.tolist(), **self.direction_source.to_dict()}


def prompts_sha256(prompts: Sequence[str]) -> str:
    """sha256 of the prompt list as UTF-8 JSON (order matters: pairs are matched by position)."""
    return hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode("utf-8")).hexdigest()


def read_pairs(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """A JSONL file with one ``{"positive": ..., "negative": ...}`` object per non-blank line."""
    p = Path(path)
    if not p.is_file():
        raise bad_argument("pairs", str(path), 'a JSONL file of {"positive": "...", "negative": "..."} lines')
    pos, neg = [], []
    for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            item = None
        if not (isinstance(item, dict) and isinstance(item.get("positive"), str) and isinstance(item.get("negative"), str)):
            raise bad_argument("pairs", f"{p.name} line {k}: {line[:60]}",
                               'one JSON object per line with string fields "positive" and "negative"')
        pos.append(item["positive"])
        neg.append(item["negative"])
    if not pos:
        raise bad_argument("pairs", str(path), "a JSONL file with at least one pair")
    return pos, neg


def read_prompt_lines(path: str | os.PathLike, name: str) -> list[str]:
    """One prompt per non-blank line of a text file."""
    p = Path(path)
    if not p.is_file():
        raise bad_argument(name, str(path), "a text file with one prompt per line")
    try:
        lines = [ln.strip() for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except UnicodeDecodeError:
        raise bad_argument(name, str(path), "a UTF-8 text file with one prompt per line (this one is binary)") from None
    if not lines:
        raise bad_argument(name, str(path), "a file with at least one non-blank line (one prompt per line)")
    return lines


def token_reduction(adapter, layer: int) -> str:
    """"last" when layer ``layer`` attends causally (its last token has seen the prompt), else "mean"."""
    return "mean" if adapter.mask(layer).kind == "full" else "last"


def layer_states(model: Any, adapter, layer: int, prompts: Sequence[str], tokenizer: Any, *, token: str,
                 batch_size: int = 16, name: str = "prompts", bar: Any = None) -> torch.Tensor:
    """(P, d) float64: the output of execution layer ``layer`` for each prompt, reduced over its real
    tokens (``token`` = "last" or "mean"). Read with forward hooks on the model's own blocks."""
    base = model.base_model
    seq = adapter.layer_sequence()
    names = sorted({adapter.layer_block(s) for s in set(seq)})
    out: list[torch.Tensor] = []
    for start in range(0, len(prompts), batch_size):
        batch = encode(model, list(prompts[start:start + batch_size]), tokenizer, name=name)
        calls: list[torch.Tensor] = []
        handles = [base.get_submodule(n).register_forward_hook(
            lambda m, a, o: calls.append((o[0] if isinstance(o, (tuple, list)) else o).detach())) for n in names]
        run_hooked(model, batch, handles, expected_calls=len(seq), calls=calls)
        h = calls[layer].to("cpu", torch.float64)  # (B, n, d)
        mask = batch.attention_mask.to(torch.float64)
        if token == "mean":
            out.append((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
        else:  # the last real token, whichever side the tokenizer pads
            last = (mask * torch.arange(mask.shape[1], dtype=torch.float64)).argmax(1)
            out.append(h[torch.arange(h.shape[0]), last])
        if bar is not None:
            bar.update(len(out[-1]))
    return torch.cat(out)


def contrastive_direction(
    model: Any,
    positive: Sequence[str] | str | os.PathLike | None = None,
    negative: Sequence[str] | str | os.PathLike | None = None,
    *,
    pairs: str | os.PathLike | None = None,
    layer: int = -1,
    method: Literal["mean-diff", "pca"] = "mean-diff",
    token: Literal["auto", "last", "mean"] = "auto",
    tokenizer: Any = None,
    batch_size: int = 16,
    progress: bool = False,
) -> ContrastiveDirection:
    """The direction separating ``positive`` from ``negative`` prompts in the hidden state after
    execution layer ``layer`` (negative counts from the end). Prompts: two lists of strings, two
    text files (one prompt per line), or ``pairs=`` a JSONL file of {"positive", "negative"} lines.
    ``method``: "mean-diff" or "pca" (pairs: as many positives as negatives, matched by position).
    ``progress``: a tqdm bar on stderr over the prompts."""
    if method not in METHODS:
        raise bad_argument("method", method, f"one of {METHODS}")
    if token not in TOKENS:
        raise bad_argument("token", token, f"one of {TOKENS}")
    pairs_file = None
    if pairs is not None:
        if positive is not None or negative is not None:
            raise bad_argument("pairs", str(pairs), "either pairs= or positive= and negative=, not both")
        positive, negative = read_pairs(pairs)
        pairs_file = Path(pairs).name
    if positive is None or negative is None:
        raise bad_argument("positive" if positive is None else "negative", None,
                           "prompts on both sides: positive= and negative= (lists or files), or pairs= (JSONL)")
    positive = _prompt_list(positive, "positive")
    negative = _prompt_list(negative, "negative")
    if method == "pca" and len(positive) != len(negative):
        raise bad_argument("negative", f"{len(negative)} prompts for {len(positive)} positive ones",
                           "as many negative as positive prompts: pca uses the pairwise differences",
                           "Use method='mean-diff' for unpaired sets.")
    if method == "pca" and len(positive) < 2:
        raise bad_argument("positive", positive, "at least 2 pairs for pca")
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = load_model(model)
    source = open_source(model)
    adapter = source.adapter
    L = select_layers(layer, adapter.n_layers, name="layer")[0]
    tokenizer = load_tokenizer(model, tokenizer)
    if tokenizer is None:
        raise bad_argument("tokenizer", None, "the model's tokenizer (text prompts must be tokenized)",
                           "Pass tokenizer=... .")
    red = token_reduction(adapter, L) if token == "auto" else token
    from .edit import _bar

    with _bar("contrastive", len(positive) + len(negative), progress) as bar:
        hp = layer_states(model, adapter, L, positive, tokenizer, token=red, batch_size=batch_size, name="positive",
                          bar=bar)
        hn = layer_states(model, adapter, L, negative, tokenizer, token=red, batch_size=batch_size, name="negative",
                          bar=bar)
    explained = None
    if method == "mean-diff":
        raw = hp.mean(0) - hn.mean(0)
        raw_norm = float(raw.norm())
    else:
        D = hp - hn
        _, S, Vh = torch.linalg.svd(D, full_matrices=False)
        raw = Vh[0]
        if float((D @ raw).mean()) < 0:  # sign: the positives lie on the + side on average
            raw = -raw
        raw_norm = float(S[0]) / np.sqrt(D.shape[0])
        explained = float(S[0] ** 2 / (S ** 2).sum())
    if raw_norm == 0 or not np.isfinite(raw_norm):
        raise bad_argument("positive", positive[:2], "prompts whose states differ from the negative ones",
                           "The two sets give identical mean states.")
    u = check_vector(raw, adapter.d_model, name="contrastive direction", model_name=source.model_id)
    return ContrastiveDirection(vector=u, method=method, layer=L, token=red, n_positive=len(positive),
                                n_negative=len(negative), positive_sha256=prompts_sha256(positive),
                                negative_sha256=prompts_sha256(negative), raw_norm=raw_norm, explained=explained,
                                pairs_file=pairs_file)


def _prompt_list(value: Any, name: str) -> list[str]:
    if isinstance(value, (str, os.PathLike)) and Path(value).is_file():
        return read_prompt_lines(value, name)
    if isinstance(value, str):
        raise bad_argument(name, value, "a list of prompts or an existing text file (one prompt per line)")
    items = list(value)
    if not items or not all(isinstance(p, str) and p.strip() for p in items):
        raise bad_argument(name, items[:3], "a non-empty list of non-empty strings")
    return items
