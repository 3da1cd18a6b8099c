"""Ways to break a checkpoint folder the way a corrupt download, a hand edit or an attacker would,
for the tests of what steerformer refuses (each function edits the folder in place)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Callable

#: JSON nested far deeper than Python's recursion limit (json.loads raises RecursionError on it).
DEEP = "[" * 100_000 + "]" * 100_000


def edit_config(folder: Path, **fields: Any) -> Path:
    """Set (or, with ``...``, remove) fields of ``folder/config.json``."""
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in fields.items():
        if v is ...:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def read_header(file: Path) -> tuple[dict, bytes]:
    raw = file.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_header(file: Path, header_json: str | bytes, data: bytes) -> None:
    h = header_json.encode() if isinstance(header_json, str) else header_json
    h += b" " * (-len(h) % 8)
    file.write_bytes(struct.pack("<Q", len(h)) + h + data)


def edit_header(file: Path, edit: Callable[[dict], object]) -> None:
    """``edit(header)`` in place (tensor entries and ``__metadata__``), data bytes untouched."""
    header, data = read_header(file)
    edit(header)
    write_header(file, json.dumps(header), data)


def deep_header(file: Path) -> None:
    """A safetensors header that is valid up to one extra entry nested 100 000 levels deep."""
    header, data = read_header(file)
    write_header(file, json.dumps(header)[:-1] + ', "zz": ' + DEEP + "}", data)


def flip_tensor_byte(file: Path, key: str, offset: int = 5) -> None:
    """Flip one bit of tensor ``key``'s data in a safetensors file."""
    header, data = read_header(file)
    begin = header[key]["data_offsets"][0]
    raw = bytearray(file.read_bytes())
    raw[len(raw) - len(data) + begin + offset] ^= 0x40
    file.write_bytes(bytes(raw))


def drop_tensor(folder: Path, key: str) -> None:
    """Remove tensor ``key`` from ``folder/model.safetensors`` (the rest byte for byte the same values)."""
    from safetensors.torch import load_file, save_file

    f = folder / "model.safetensors"
    tensors = load_file(str(f))
    del tensors[key]
    save_file(tensors, str(f), metadata={"format": "pt"})
