"""Where the target direction u comes from: an array, a ``.npy`` file, a shared
:class:`~steerformer.steering.direction.Direction` (the object, its folder or Hub id, or a llama.cpp
control-vector ``.gguf``), a token, an eigenvector of F_L, the mean final hidden state of a text, or
contrasting prompts. Every source ends as a finite unit float64 vector of the model's width, and
says what it was (``DirectionSource``); :func:`resolve_direction` picks the one source a call
names, :func:`ablation_directions` the k directions per layer an ablation removes.

Contrastive directions (activation addition / representation engineering, docs/math.md §5b): from
positive and negative prompts p_i⁺, p_i⁻, with h(p) the hidden state *after* execution layer ℓ
(the output of block ℓ, before any final norm) reduced over the prompt's tokens:

    mean-diff:  u = N(mean_i h(p_i⁺) − mean_j h(p_j⁻))
    pca:        u = first right singular vector of the stacked d_i = h(p_i⁺) − h(p_i⁻),
                sign chosen so that mean_i ⟨d_i, u⟩ > 0   (needs pairs: as many positives as negatives)

Token reduction: the last real token when layer ℓ attends causally (it has seen the whole prompt),
the mean over real tokens when it attends fully (encoders). Which one comes from the adapter's
declared mask of layer ℓ, never from the model's type; ``reduction=`` overrides it. The result is a
:class:`ContrastiveDirection`: the unit vector plus where it came from (method, layer, reduction,
sha256 of each prompt list); ``steer(model, direction)`` records that source.

``token=`` means one thing everywhere: a word whose direction the call steers toward (or
removes), read in the basis of the layer the method writes to — the unembedding row for the
paper's edit of the last layer (whose output the head reads; the input embedding row without a
head), the templated contrast (``calibrate.concept_directions``) for the addition after a middle
layer, where the unembedding row moves nothing (docs/steering-chat.md). ``record.direction_source``
says which reading was used. How a contrastive prompt's states are reduced was also called
``token=`` ("last" or "mean"): it is ``reduction=`` now.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence

import numpy as np
import torch

from ..configs import progress_bar, select_layers
from ..errors import bad_argument
from ..loading import load_model, load_tokenizer, name_looks_like_path, open_source
from ..prompts import check_fits, words_of
from . import algebra
from .common import is_path_like, vector_hash
from .measure import encode
from .probe import capture, model_device

if TYPE_CHECKING:  # imported where a shared direction is read or made (a call from a token never is)
    from .direction import Direction

METHODS = ("mean-diff", "pca")
TOKENS = ("auto", "last", "mean")


@dataclasses.dataclass
class DirectionSource:
    kind: str  # "array", "npy", "token", "eigvec", "text"
    detail: dict

    def to_dict(self) -> dict:
        return {"kind": self.kind, **self.detail}


def check_vector(value: Any, d: int, *, name: str = "direction", model_name: str = "the model") -> torch.Tensor:
    """A finite, non-zero vector of length ``d``, returned unit-norm in float64."""
    try:
        arr = value.detach().cpu().to(torch.float64).numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    except Exception:  # ragged nested lists
        raise bad_argument(name, value, f"a numeric vector of {d} entries") from None
    if arr.dtype.kind == "c":
        raise bad_argument(name, f"array of dtype {arr.dtype}", f"a real vector of {d} entries",
                           "A direction in the residual stream is real; pass e.g. v.real if that is what you mean.")
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise bad_argument(name, f"array of dtype {arr.dtype}", f"a numeric vector of {d} entries",
                           "Ragged lists and strings cannot be directions.")
    arr = arr.astype(np.float64).reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr.astype(np.float64)
    if arr.ndim != 1 or arr.shape[0] != d:
        raise bad_argument(name, f"array of shape {arr.shape}",
                           f"a vector of {d} entries: {name} has {arr.size if arr.ndim else 0} entries but "
                           f"{model_name} has d_model={d}")
    if not np.isfinite(arr).all():
        raise bad_argument(name, f"a vector with {int((~np.isfinite(arr)).sum())} NaN/inf entries", "a finite vector")
    if not arr.any():
        raise bad_argument(name, "the zero vector", "a non-zero vector (only its direction is used)")
    with np.errstate(over="ignore", under="ignore"):
        n = np.linalg.norm(arr)
    if not np.isfinite(n) or n < 1e-150:
        # The norm overflows (entries ~1e308) or loses precision: scale by max |x| first. Only
        # here, so ordinary vectors keep their exact bytes.
        arr = arr / np.abs(arr).max()
        n = np.linalg.norm(arr)
    return torch.from_numpy(arr / n)


def check_vectors(value: Any, d: int, *, name: str = "direction", model_name: str = "the model") -> torch.Tensor:
    """(k, d) unit rows from one vector (d,) or k vectors (k, d), each checked as :func:`check_vector`."""
    arr = value.detach().cpu().to(torch.float64).numpy() if isinstance(value, torch.Tensor) else value
    try:
        arr = np.asarray(arr)
    except Exception:  # ragged nested lists
        raise bad_argument(name, value, f"a vector of {d} entries or k vectors (k, {d})") from None
    if arr.ndim == 2 and arr.shape[0] > d and arr.shape[1] == d:  # they cannot be independent
        raise bad_argument(name, f"{arr.shape[0]} vectors of width {d}", f"at most {d} directions: more than "
                           f"d_model={d} vectors in {d} dimensions are linearly dependent, so ablating them would "
                           "remove fewer directions than asked", "Pass at most d_model independent directions.")
    if arr.ndim == 2 and arr.shape[0] > 1 and arr.shape[1] == d:
        return torch.stack([check_vector(row, d, name=f"{name}[{i}]", model_name=model_name)
                            for i, row in enumerate(arr)])
    return check_vector(arr, d, name=name, model_name=model_name)[None]


def read_npy(path: str | os.PathLike, *, name: str = "direction") -> np.ndarray:
    """The array of a ``.npy`` file, refused in one line when it is missing, an archive, not a
    ``.npy`` or an object array."""
    p = Path(path)
    if not p.is_file():
        raise bad_argument(name, str(path), "an existing .npy file or an array")
    with open(p, "rb") as f:
        magic = f.read(6)
    if magic[:4] == b"PK\x03\x04":
        raise bad_argument(name, str(path), "a .npy file holding one vector (this is an .npz archive)",
                           "Extract the array: np.save('u.npy', np.load(path)['name']).")
    if magic != b"\x93NUMPY":
        raise bad_argument(name, str(path), "a .npy file written by np.save (this file does not start with the "
                           ".npy magic bytes: a text or other file renamed .npy?)",
                           "Save the vector with np.save(path, np.asarray(v, dtype=float)).")
    try:
        arr = np.load(p, allow_pickle=False)
    except ValueError as exc:  # object arrays (ragged lists) need pickle: refused
        raise bad_argument(name, str(path), f"a numeric .npy array ({exc})",
                           "Save a float array with np.save(path, np.asarray(v, dtype=float)).") from None
    except Exception as exc:
        raise bad_argument(name, str(path), f"a readable .npy file ({type(exc).__name__}: {exc})") from None
    return arr


def shared_direction(value: Any, *, name: str = "direction") -> tuple[Direction, str] | None:
    """(Direction, where it came from) when ``value`` names a shared direction: a
    :class:`Direction`, a folder written by ``Direction.save``, a llama.cpp control-vector
    ``.gguf``, or a Hub repo id ('namespace/name'); None for arrays and ``.npy`` files."""
    loaded = sys.modules.get(f"{__package__}.direction")  # no Direction object exists before its module is imported
    if loaded is not None and isinstance(value, loaded.Direction):
        return value, "object"
    if not is_path_like(value):
        return None
    text = os.fsdecode(value)
    p = Path(text).expanduser()
    if p.suffix.lower() == ".npy":
        return None
    from .direction import Direction

    if p.suffix.lower() == ".gguf":
        if not p.is_file():
            raise bad_argument(name, text, "an existing control-vector .gguf file")
        return Direction.from_control_vector(p, name=name), text
    if p.is_dir():
        return Direction.load(p), text
    if not p.exists() and not name_looks_like_path(text) and text.count("/") == 1:
        return Direction.load(text), text  # a Hub repo id
    return None


def _shared_source(direction: Direction, where: str, layers: list[int]) -> DirectionSource:
    return DirectionSource("direction", {"from": where, "model_id": direction.model_id, "revision": direction.revision,
                                         "method": direction.method, "layers": layers,
                                         "prompts_sha256": direction.prompts_sha256, "sha256": direction.sha256})


def _check_width(direction: Direction, where: str, d: int, model_name: str, name: str) -> None:
    if direction.d_model != d:
        what = "a control vector" if direction.method == "control vector" else "a direction"
        raise bad_argument(name, f"{where} (width {direction.d_model})",
                           f"{what} of the model's width: {model_name} has d_model={d}",
                           "Use one made for this model.")


def token_direction(model: Any, tokenizer: Any, token: str, d: int) -> tuple[torch.Tensor, dict]:
    """The embedding row of ``token``: the *unembedding* (output embedding) row when the model has
    an LM head — the direction that raises that token's logit — else the input embedding row.

    A string that tokenizes into several pieces is refused (documented choice: averaging pieces
    would steer toward none of them); the error lists the pieces."""
    if tokenizer is None:
        raise bad_argument("token", token, "a model whose tokenizer is known", "Pass tokenizer=... .")
    ids = tokenizer(token, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise bad_argument("token", token, f"a string that is one token; it splits into {len(ids)} pieces {pieces}",
                           "Pick one of the pieces, or use text=... for the mean state of a phrase.")
    head = model.get_output_embeddings() if getattr(model, "base_model", model) is not model else None
    table, which = (head.weight, "unembedding") if head is not None else (model.get_input_embeddings().weight, "input-embedding")
    row = table[ids[0]].detach()
    if row.shape[0] != d:
        raise bad_argument("token", token, f"an embedding of width d_model={d}; the {which} has width {row.shape[0]}",
                           "Give the direction as an array instead.")
    return check_vector(row, d, name="token"), {"token": token, "token_id": int(ids[0]), "row": which}


def eigvec_direction(F: torch.Tensor | None, k: int, *,
                     factors: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, dict]:
    """The k-th right eigenvector of F (sorted by real part, descending); its real part when complex.

    ``factors`` (A, B) with F = A·B: when the layer's rank r < d the eigenvectors are those of the
    nonzero spectrum (the r × r problem, docs/math.md §1b), numbered exactly as ``analyze`` reports them —
    the d − r null-space directions of F are rounding noise and never a steering target."""
    from ..spectra import layer_spectrum

    vals, vecs, _ = layer_spectrum(F, factors=factors)
    nonzero = vals != 0  # the factored path lists F's zero eigenvalue too: never a steering target
    vals, vecs = vals[nonzero], vecs[:, nonzero]
    d, m = vecs.shape
    if not isinstance(k, (int, np.integer)) or not 0 <= k < m:
        raise bad_argument("eigvec", k, f"an eigenvector index in [0, {m - 1}] (0 = principal, by real part"
                           + (f"; the layer has rank {m} < d = {d}" if m < d else "") + ")")
    v = vecs[:, int(k)]
    is_complex = bool(v.imag.abs().max() > 1e-12) if v.is_complex() else False
    return check_vector(v.real if v.is_complex() else v, d, name="eigvec"), {
        "index": int(k), "eigenvalue": [float(vals[k].real), float(vals[k].imag)],
        "part": "real part of a complex eigenvector" if is_complex else "real eigenvector"}


def text_direction(model: Any, tokenizer: Any, text: str, d: int,
                   max_positions: int | None = None) -> tuple[torch.Tensor, dict]:
    """Mean final hidden state over the tokens of ``text`` (the unedited model's); ``max_positions``:
    the positions the model embeds (a longer text is refused before the model runs)."""
    if tokenizer is None:
        raise bad_argument("text", text, "a model whose tokenizer is known", "Pass tokenizer=... .")
    if not isinstance(text, str) or not text.strip():
        raise bad_argument("text", text, "a non-empty string")
    enc = tokenizer([text], return_tensors="pt")
    check_fits(int(enc["input_ids"].shape[1]), max_positions, name="text", value=words_of(text),
               fix="Shorten it: the direction is the mean of its tokens' final states.")
    base = getattr(model, "base_model", model)
    dev = model_device(base)
    enc = {k: v.to(dev) for k, v in enc.items()} if dev is not None else enc
    with torch.no_grad():
        h = base(**enc).last_hidden_state[0]
    return check_vector(h.mean(0), d, name="text"), {"text": text, "n_tokens": int(h.shape[0])}


def resolve_direction(model, source, layer, *, direction=None, token=None, eigvec=None, text=None, tokenizer=None):
    """(u, DirectionSource) from exactly one of the direction sources."""
    given = {k: v for k, v in (("direction", direction), ("token", token), ("eigvec", eigvec), ("text", text)) if v is not None}
    if len(given) != 1:
        raise bad_argument("direction", sorted(given) or None,
                           "exactly one source: direction= (array or .npy path), token=, eigvec= or text=")
    d, name = source.adapter.d_model, source.model_id
    if direction is not None:
        if isinstance(getattr(direction, "direction_source", None), DirectionSource):  # e.g. contrastive
            return check_vector(direction.vector, d, model_name=name), direction.direction_source
        shared = shared_direction(direction)
        if shared is not None:
            _check_width(shared[0], shared[1], d, name, "direction")
            return (check_vector(shared[0].vector(layer), d, model_name=name),
                    _shared_source(shared[0], shared[1], [layer]))
        if isinstance(direction, (str, bytes)) or hasattr(direction, "__fspath__"):
            path = str(direction)
            u = check_vector(read_npy(path), d, name=f"direction ({Path(path).name})", model_name=name)
            return u, DirectionSource("npy", {"path": path})
        return check_vector(direction, d, model_name=name), DirectionSource("array", {})
    if token is not None:
        u, info = token_direction(model, tokenizer, token, d)
        return u, DirectionSource("token", info)
    if eigvec is not None:
        from ..matrices import read_attention_weights  # an eigenvector of F needs the layer's weights; u of a word does not

        w = read_attention_weights(source, [layer], parts=("vo",), device="cpu")[layer]
        algebra.check_value_map(w.value_matrix(), layer, source.model_id)  # a zero F has no eigenvector to give
        u, info = eigvec_direction(None, eigvec, factors=w.layer_factors())  # numbered as analyze reports
        return u, DirectionSource("eigvec", {**info, "layer": layer})
    u, info = text_direction(model, tokenizer, text, d, source.adapter.max_positions)
    return u, DirectionSource("text", info)


@dataclasses.dataclass
class LayerDirections:
    """The directions an ablation removes: the same (k, d) unit rows at every layer (``every``), or
    one set per layer (``per_layer``, from a shared direction made at several layers)."""

    source: DirectionSource
    every: torch.Tensor | None = None
    per_layer: dict = dataclasses.field(default_factory=dict)

    def at(self, layer: int | None) -> torch.Tensor:
        """The (k, d) rows for execution layer ``layer`` (None: the embeddings, before any layer)."""
        if self.every is not None:
            return self.every
        if layer is None:
            raise bad_argument("writers", "embedding", "one set of directions for every layer to ablate the "
                               "embeddings (this direction has one per layer, and none for the embeddings' output)",
                               "Drop 'embedding' from writers, or pass a direction made at one layer.")
        return self.per_layer[layer]


def ablation_directions(model, source, layers, *, direction=None, token=None, eigvec=None, text=None,
                        tokenizer=None) -> LayerDirections:
    """The directions to remove at each of ``layers`` (unit rows, not yet orthonormalized).
    ``direction``: one vector (d,) or k vectors (k, d) (array, tensor or ``.npy``), or a shared
    :class:`Direction` (per layer: a layer it lacks is refused); ``eigvec`` refers to the last of
    ``layers``."""
    d, name = source.adapter.d_model, source.model_id
    shared = shared_direction(direction) if direction is not None else None
    if shared is not None:
        found, where = shared
        _check_width(found, where, d, name, "direction")
        per_layer = {layer: check_vectors(found.at(layer), d, name=f"direction (layer {layer})", model_name=name)
                     for layer in layers}  # a missing layer is refused here, before anything is planned
        src = _shared_source(found, where, list(layers))
        if len(found.layers) == 1:
            return LayerDirections(src, every=next(iter(per_layer.values())))
        return LayerDirections(src, per_layer=per_layer)
    if direction is not None and getattr(direction, "direction_source", None) is None:
        rows = check_vectors(read_npy(direction) if is_path_like(direction) else direction, d, model_name=name)
        if rows.shape[0] > 1:
            kind = "npy" if is_path_like(direction) else "array"
            detail = {"path": os.fsdecode(direction)} if kind == "npy" else {}
            return LayerDirections(DirectionSource(kind, {**detail, "k": int(rows.shape[0])}), every=rows)
    u, src = resolve_direction(model, source, layers[-1], direction=direction, token=token, eigvec=eigvec, text=text,
                               tokenizer=tokenizer)
    return LayerDirections(src, every=u[None])


# ---- contrastive directions ----------------------------------------------------------------------
@dataclasses.dataclass
class ContrastiveDirection:
    """A unit direction (float64, d_model) extracted from contrasting prompts, with its provenance."""

    vector: torch.Tensor
    method: str
    layer: int
    token: str  # "last" | "mean": how a prompt's states were reduced (``reduction``; the stored name)
    n_positive: int
    n_negative: int
    positive_sha256: str
    negative_sha256: str
    raw_norm: float  # ‖mean difference‖ (mean-diff) or the top singular value / √n (pca), before normalizing
    explained: float | None = None  # pca: share of Σσ² in the first component
    pairs_file: str | None = None
    model_id: str | None = None
    model_commit: str | None = None

    def __repr__(self) -> str:  # the vector stays out: one line
        return (f"ContrastiveDirection({self.method} at layer {self.layer}, token={self.token}, "
                f"{self.n_positive}+/{self.n_negative}- prompts, raw_norm={self.raw_norm:.4g}, d={self.vector.numel()})")

    @property
    def reduction(self) -> str:
        """How a prompt's states were reduced: "last" or "mean" (stored as ``token``)."""
        return self.token

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

    def to_direction(self) -> Direction:
        """This direction as a shareable :class:`Direction` at its layer (the unit vector; method,
        prompt hashes, token reduction and counts as metadata)."""
        from .direction import Direction

        meta = {k: v for k, v in dataclasses.asdict(self).items()
                if k not in ("vector", "method", "layer", "positive_sha256", "negative_sha256", "model_id",
                             "model_commit")}
        return Direction({self.layer: self.vector[None]}, model_id=self.model_id, revision=self.model_commit,
                         method=f"contrastive {self.method}",
                         prompts_sha256={"positive": self.positive_sha256, "negative": self.negative_sha256},
                         metadata=meta)


def prompts_sha256(prompts: Sequence[str]) -> str:
    """sha256 of the prompt list as UTF-8 JSON (order matters: pairs are matched by position)."""
    return hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode("utf-8")).hexdigest()


def read_pairs(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """A JSONL file with one ``{"positive": ..., "negative": ...}`` object per non-blank line."""
    p = Path(path)
    if not p.is_file():
        raise bad_argument("pairs", str(path), 'a JSONL file of {"positive": "...", "negative": "..."} lines')
    from ..results import parse_json  # a pairs file only

    pos, neg = [], []
    for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = parse_json(line, f"{p.name} line {k}")
        except ValueError:  # not JSON, or nested past any pair's depth
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


def layer_states(model: Any, adapter, layer: int, prompts: Sequence[str], tokenizer: Any, *, reduction: str,
                 batch_size: int = 16, name: str = "prompts", bar: Any = None) -> torch.Tensor:
    """(P, d) float64: the output of execution layer ``layer`` for each prompt, reduced over its real
    tokens (``reduction`` = "last" or "mean"). Read by the probe room's capture."""
    out: list[torch.Tensor] = []
    for start in range(0, len(prompts), batch_size):
        batch = encode(model, list(prompts[start:start + batch_size]), tokenizer, name=name)
        h = capture(model, adapter, batch, outputs=[layer]).outputs[layer].to("cpu", torch.float64)  # (B, n, d)
        mask = batch.attention_mask.to("cpu", torch.float64)  # beside h, on the host
        if reduction == "mean":
            out.append((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
        else:  # the last real token, whichever side the tokenizer pads
            last = (mask * torch.arange(mask.shape[1], dtype=torch.float64)).argmax(1)
            out.append(h[torch.arange(h.shape[0]), last])
        if bar is not None:
            bar.update(len(out[-1]))
    return torch.cat(out)


def contrastive_direction(model: Any, positive: Sequence[str] | str | os.PathLike | None = None,
                          negative: Sequence[str] | str | os.PathLike | None = None, *,
                          pairs: str | os.PathLike | None = None, layer: int = -1,
                          method: Literal["mean-diff", "pca"] = "mean-diff",
                          reduction: Literal["auto", "last", "mean"] = "auto", tokenizer: Any = None,
                          batch_size: int = 16, progress: bool = False) -> ContrastiveDirection:
    """The direction separating ``positive`` from ``negative`` prompts in the hidden state after
    execution layer ``layer`` (negative counts from the end). Prompts: two lists of strings, two
    text files (one prompt per line), or ``pairs=`` a JSONL file of {"positive", "negative"} lines.
    ``method``: "mean-diff" or "pca" (pairs: as many positives as negatives, matched by position).
    ``reduction``: how a prompt's states are reduced, "last" token, "mean" over tokens, or "auto" (module
    doc). ``progress``: a tqdm bar on stderr over the prompts."""
    if method not in METHODS:
        raise bad_argument("method", method, f"one of {METHODS}")
    if reduction not in TOKENS:
        raise bad_argument("reduction", reduction, f"one of {TOKENS}")
    pairs_file = None
    if pairs is not None:
        if positive is not None or negative is not None:
            raise bad_argument("pairs", str(pairs), "either pairs= or positive= and negative=, not both")
        positive, negative = read_pairs(pairs)
        pairs_file = Path(pairs).name
    if positive is None or negative is None:
        raise bad_argument("positive" if positive is None else "negative", None,
                           "prompts on both sides: positive= and negative= (lists or files), or pairs= (JSONL)")
    positive, negative = _prompt_list(positive, "positive"), _prompt_list(negative, "negative")
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
    red = ("mean" if adapter.mask(L).kind == "full" else "last") if reduction == "auto" else reduction
    with progress_bar(progress, "contrastive", total=len(positive) + len(negative), unit="prompt") as bar:
        hp, hn = (layer_states(model, adapter, L, prompts, tokenizer, reduction=red, batch_size=batch_size, name=side,
                               bar=bar) for prompts, side in ((positive, "positive"), (negative, "negative")))
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
                                pairs_file=pairs_file, model_id=source.model_id, model_commit=source.commit)


def contrastive_directions(model: Any, positive: Any = None, negative: Any = None, *, layers: Sequence[int],
                           pairs: Any = None, method: Literal["mean-diff", "pca"] = "mean-diff",
                           reduction: Literal["auto", "last", "mean"] = "auto", tokenizer: Any = None,
                           batch_size: int = 16, progress: bool = False) -> Direction:
    """:func:`contrastive_direction` at each of ``layers``, as one shareable :class:`Direction`
    (a unit vector per layer; the prompts' sha256, the reduction, and each layer's raw norm and
    explained share as metadata)."""
    from ..formats import model_hint_of  # a shareable direction only: formats is no part of a steer
    from .direction import Direction

    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = load_model(model)
    adapter = open_source(model).adapter
    n_layers = adapter.n_layers
    found = [contrastive_direction(model, positive, negative, pairs=pairs, layer=L, method=method, reduction=reduction,
                                   tokenizer=tokenizer, batch_size=batch_size, progress=progress)
             for L in select_layers(list(layers), n_layers, name="layers")]
    first = found[0].to_direction()
    return Direction({c.layer: c.vector[None] for c in found}, model_id=first.model_id, revision=first.revision,
                     method=first.method, prompts_sha256=first.prompts_sha256,
                     metadata={**{k: v for k, v in first.metadata.items() if k not in ("raw_norm", "explained")},
                               # llama.cpp's architecture name: export-gguf needs no --model-hint
                               "model_hint": model_hint_of(adapter.model_type),
                               "raw_norm": {str(c.layer): c.raw_norm for c in found},
                               "explained": {str(c.layer): c.explained for c in found}})


def _prompt_list(value: Any, name: str) -> list[str]:
    if isinstance(value, (str, os.PathLike)) and Path(value).is_file():
        return read_prompt_lines(value, name)
    if isinstance(value, (str, os.PathLike)):  # a path that is no file (a missing one, a folder)
        raise bad_argument(name, str(value), "a list of prompts or an existing text file (one prompt per line)")
    items = list(value)
    if not items or not all(isinstance(p, str) and p.strip() for p in items):
        raise bad_argument(name, items[:3], "a non-empty list of non-empty strings")
    return items
