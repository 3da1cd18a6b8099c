"""What the steering modules share, below all of them (so none imports another for it): the names
and formats of a steered folder, the identities (hashes) of tensors and directions, the device
float64 work runs on, the transformer inside a SentenceTransformer, the non-finite error,
progress, and streamed safetensors files.

Nothing here knows an edit, a record or a chain; the saved chain's JSON (``chain_payload``) is
built here from plain dictionaries, once, for every writer (``save_steered`` and the lazy edit).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from safetensors.torch import save_file

from ..configs import progress_bar
from ..errors import CheckpointError, SteerformerError, bad_argument
from ..loading import load_model, read_safetensors_file_header

#: the provenance folder inside a steered checkpoint or adapter folder
SIDE_DIR = "steerformer"
#: the chain (records with their edits, hashes) inside SIDE_DIR
RECORD_FILE = "record.json"
#: the true original of every edited weight inside SIDE_DIR
ORIGINAL_FILE = "original.safetensors"
#: the safetensors metadata key of every model shard that carries a copy of the chain
METADATA_KEY = "steerformer"
CHAIN_FORMAT = "steerformer.chain/1"


# ---- identities ----------------------------------------------------------------------------------
def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of a tensor's stored bytes (dtype-exact: the identity used to verify an undo)."""
    t = t.detach().contiguous().cpu()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def vector_hash(v: torch.Tensor) -> str:
    """sha256 of the float64 little-endian bytes: the identity of a direction in records."""
    return hashlib.sha256(np.ascontiguousarray(v.detach().cpu().numpy().astype("<f8")).tobytes()).hexdigest()


def cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    """cos(x, y) in float64 (0 for a zero vector)."""
    x, y = x.to(torch.float64), y.to(device=x.device, dtype=torch.float64)
    return float(x @ y / (torch.linalg.vector_norm(x) * torch.linalg.vector_norm(y)).clamp_min(1e-300))


# ---- devices and layouts -------------------------------------------------------------------------
def work_device(device: torch.device) -> torch.device:
    """Where float64 arithmetic for a weight on ``device`` runs (MPS has no float64)."""
    return torch.device("cpu") if device.type == "mps" else device


def stores_transposed(adapter: Any) -> bool:
    """Whether the adapter stores W_Oᵀ (GPT-2 Conv1D): read from its own conversion, on a 2×3 probe."""
    return tuple(adapter.output_weight_to_stored(torch.zeros(2, 3, dtype=torch.float64)).shape) == (3, 2)


def as_sentence_transformer(obj: Any):
    """``obj`` when it is a ``SentenceTransformer`` (never imports the package), else None."""
    st = sys.modules.get("sentence_transformers")
    cls = getattr(st, "SentenceTransformer", None) if st is not None else None
    return obj if cls is not None and isinstance(obj, cls) else None


def inner_model(st_model) -> Any:
    """The transformers model of module 0 (where ``steer`` edits and keeps its state)."""
    first = st_model[0]
    model = getattr(first, "auto_model", None)
    if model is None:
        raise bad_argument("model", type(first).__name__, "a SentenceTransformer whose first module is a Transformer")
    return model


def transformer_of(model: Any) -> Any:
    """The transformers model a steering call works on: module 0 of a ``SentenceTransformer``
    (where ``steer`` edits and the chain lives), else ``model`` itself."""
    st = as_sentence_transformer(model)
    return inner_model(st) if st is not None else model


def is_path_like(value: Any) -> bool:
    return isinstance(value, (str, bytes)) or hasattr(value, "__fspath__")


def model_object(model: Any, verb: str) -> Any:
    """The transformers model a call edits in place (a SentenceTransformer's module 0); a path is
    refused (``verb`` edits a model object)."""
    if is_path_like(model):
        raise bad_argument("model", model, f"a model object ({verb} edits it in place)",
                           "Load it first: model = steerformer.steering.load_for_steering(path).")
    return load_model(transformer_of(model))


def non_finite(where: str, what: str) -> SteerformerError:
    """The one error for an edit whose weights, outputs or record values are not finite."""
    return SteerformerError(f"the edit gives non-finite {what} ({where}): nothing was changed or saved. "
                            "Use a smaller gain/strength (or target alignment), or check the direction.")


# ---- progress ------------------------------------------------------------------------------------
class CountedCurve:
    """A curve γ ↦ alignment that advances a progress bar per evaluation; ``close`` ends the bar."""

    def __init__(self, f: Callable[[float], float], desc: str, enabled: bool) -> None:
        self.f, self.desc, self.enabled, self.bar = f, desc, enabled, None

    def __call__(self, g: float) -> float:
        if self.bar is None:
            self.bar = progress_bar(self.enabled, self.desc, unit="eval")
        val = self.f(g)
        self.bar.update(1)
        self.bar.set_postfix(gain=f"{float(g):.3g}", alignment=f"{val:.3f}")
        return val

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---- safetensors files, streamed -----------------------------------------------------------------
def read_safetensors_metadata(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, its header validated by the one header parser
    (``loading.read_safetensors_file_header``: a corrupt or truncated file is a CheckpointError)."""
    return read_safetensors_file_header(Path(path))[1]


def add_safetensors_metadata(path: Path, extra: dict[str, str]) -> None:
    """Merge ``extra`` into a safetensors file's ``__metadata__`` by rewriting only its header and
    streaming the tensor bytes (no tensor is loaded: peak memory stays at one copy buffer)."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    rewrite_shard(path, tmp, {}, extra)
    os.replace(tmp, path)


def safetensors_hashes(path: str | os.PathLike) -> dict[str, str]:
    """sha256 of every tensor's bytes in a safetensors file, streamed (one buffer of memory). The
    same bytes :func:`tensor_sha256` hashes for the loaded tensor."""
    from ..files import open_regular  # here, not at the top: the steer path reads no file

    path = Path(path)
    header, _, start = read_safetensors_file_header(path)
    out = {}
    with open_regular(path) as f:
        for key, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            b, e = info["data_offsets"]
            f.seek(start + b)
            h = hashlib.sha256()
            for chunk in _chunks(f, e - b, f"{path}: truncated while reading tensor {key!r}"):
                h.update(chunk)
            out[key] = h.hexdigest()
    return out


#: safetensors' name of each torch dtype (the ``dtype`` of a header entry)
SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
}


def tensor_identities(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, str], dict[str, list]]:
    """(sha256, [dtype, shape]) of every tensor as a safetensors file stores it, from memory: the
    same values :func:`safetensors_hashes` and :func:`tensor_specs` read back from the written
    file. Hashed on every core (hashlib works outside the GIL), each tensor's buffer hashed in
    place (no copy)."""

    def digest(t: torch.Tensor) -> str:
        h = hashlib.sha256()
        if t.numel():
            h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
        return h.hexdigest()

    names = sorted(tensors)
    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
        hashes = dict(zip(names, pool.map(lambda k: digest(tensors[k]), names)))
    specs = {k: [SAFETENSORS_DTYPES[tensors[k].dtype], list(tensors[k].shape)] for k in names}
    return hashes, specs


def tensor_specs(path: Path) -> dict[str, list]:
    """key -> [dtype, shape] from a safetensors header (the bytes alone do not fix the tensor)."""
    return {k: [v.get("dtype"), v.get("shape")] for k, v in read_safetensors_file_header(Path(path))[0].items()}


def model_files(directory: Path) -> list[Path]:
    """The model's safetensors files of a checkpoint folder (its root, not the provenance folder)."""
    return sorted(Path(directory).glob("*.safetensors"))


def file_hashes(directory: Path) -> dict[str, str]:
    """sha256 of every other file of a checkpoint folder (config, tokenizer, card); the model's
    safetensors files (their tensors are hashed one by one, their header holds the record) and
    steerformer's own folder are left out."""
    from ..files import sha256_of  # here, not at the top: the steer path reads no file

    out = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.is_file() and not rel.startswith(SIDE_DIR + "/") and not (p.parent == directory and p.suffix == ".safetensors"):
            out[rel] = sha256_of(p)  # a FIFO swapped in after is_file: one error, never a hang
    return out


def rewrite_shard(src: Path, dst: Path, replace: dict[str, bytes], metadata: dict[str, str]) -> None:
    """Copy the safetensors file ``src`` to ``dst`` with the tensors of ``replace`` given new bytes
    (same size) and ``metadata`` merged into the header. The data is streamed: kernel-side copies
    of the untouched ranges, so memory stays flat whatever the shard's size."""
    size = src.stat().st_size
    header, meta, data_start = read_safetensors_file_header(src)  # validated before anything is copied
    with open(src, "rb") as f:
        spans = []
        for key, data in replace.items():
            info = header.get(key)
            if not isinstance(info, dict):
                raise CheckpointError(f"{src} holds no tensor {key!r}")
            begin, end = (int(x) for x in info["data_offsets"])
            if end - begin != len(data) or not 0 <= begin <= end <= size - data_start:
                raise CheckpointError(f"{src}: {key} spans bytes [{begin}, {end}) but the edited tensor has "
                                      f"{len(data)} bytes (or the span leaves the file)")
            spans.append((begin, end, data))
        meta.update(metadata)
        header["__metadata__"] = meta
        head = json.dumps(header, separators=(",", ":")).encode()
        head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
        with open(dst, "wb") as g:
            g.write(struct.pack("<Q", len(head)))
            g.write(head)
            pos = 0
            for begin, end, data in sorted(spans, key=lambda s: s[0]):
                _copy_range(f, g, data_start + pos, begin - pos)
                g.write(data)
                pos = end
            _copy_range(f, g, data_start + pos, size - data_start - pos)


def _copy_range(f, g, offset: int, count: int) -> None:
    """Copy ``count`` bytes of ``f`` from ``offset`` to ``g``'s position (copy_file_range when the
    kernel offers it, else a buffered copy)."""
    g.flush()
    done = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done < count:
                k = os.copy_file_range(f.fileno(), g.fileno(), count - done, offset + done)
                if k == 0:
                    raise CheckpointError(f"{f.name} is truncated")
                done += k
            g.seek(0, os.SEEK_END)
            return
        except OSError:  # filesystems without it (or across devices on old kernels): buffered copy
            g.seek(0, os.SEEK_END)
    f.seek(offset + done)
    for chunk in _chunks(f, count - done, f"{f.name} is truncated"):
        g.write(chunk)


def _chunks(f, count: int, truncated: str) -> Iterator[bytes]:
    """The next ``count`` bytes of ``f`` in chunks of at most 16 MiB (one buffer of memory); a file
    that ends first is a :class:`CheckpointError` saying ``truncated``."""
    while count:
        chunk = f.read(min(count, 16 << 20))
        if not chunk:
            raise CheckpointError(truncated)
        yield chunk
        count -= len(chunk)


# ---- the saved chain -----------------------------------------------------------------------------
def payload_sha256(payload: dict) -> str:
    """sha256 of the chain payload without its own ``record_sha256`` (sorted keys, compact JSON)."""
    body = {k: v for k, v in payload.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def chain_payload(chain: dict, originals: dict[str, str], shards: list[Path], folder: Path, *,
                  tensors: dict[str, str] | None = None, specs: dict[str, list] | None = None) -> dict:
    """The JSON of ``steerformer/record.json`` (and of every shard's metadata copy): the chain
    (``Steering.to_dict()``), the sha256 of each original, of every tensor of ``shards`` (their
    dtype and shape too), of every other file of ``folder``, and ``record_sha256`` of all that.
    ``tensors`` (and ``specs``) give the hashes (and [dtype, shape]) of tensors not read from a
    shard: the lazy edit's new bytes, or every tensor of a checkpoint written from memory
    (:func:`tensor_identities`)."""
    hashes: dict[str, str] = {}
    specs: dict[str, list] = dict(specs or {})
    for st in shards:
        hashes.update(safetensors_hashes(st))
        specs.update(tensor_specs(st))
    hashes.update(tensors or {})
    payload = {"format": CHAIN_FORMAT, **chain, "originals": dict(originals), "tensors": hashes,
               "tensor_specs": specs, "files": file_hashes(folder)}
    payload["record_sha256"] = payload_sha256(payload)
    return payload


def write_records(folder: Path, payload: dict) -> Path:
    """``steerformer/record.json`` (the records of a steered folder or adapter) into ``folder``: the one
    writer of the records' JSON."""
    side = folder / SIDE_DIR
    side.mkdir(exist_ok=True)
    (side / RECORD_FILE).write_text(json.dumps(payload, indent=1))
    return side


def write_chain(folder: Path, payload: dict, originals: dict[str, torch.Tensor]) -> None:
    """``steerformer/record.json`` and ``steerformer/original.safetensors`` into ``folder``."""
    side = write_records(folder, payload)
    save_file(originals, str(side / ORIGINAL_FILE), metadata={"format": "pt"})


def added_vector(edit: Any) -> torch.Tensor:
    """What an activation-addition edit adds after its block, float64: its bias change δ = γ u (the
    exact form) plus γ u from its weight (W' = W + γ u aᵀ with a·z ≈ 1 on the probe)."""
    v = float(edit.gain) * edit.u.to(torch.float64).reshape(-1)
    delta = edit.bias_change()
    return v if delta is None else v + delta.to(torch.float64).reshape(-1)
