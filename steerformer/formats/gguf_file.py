"""A GGUF file as steerformer reads and writes it: open one with a one-line error, read a metadata
value, and decide whether a target file may be written.

Every GGUF steerformer writes carries the key :data:`WRITTEN_BY` (llama.cpp, Ollama and
transformers ignore keys they do not know), so that ``overwrite=True`` replaces only a file
steerformer wrote earlier — never a model or a vector someone else made.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import bad_argument

WRITTEN_BY = "steerformer.written_by"


def open_gguf(path: str | os.PathLike, name: str = "path", what: str = "a GGUF file") -> Any:
    """``gguf.GGUFReader`` on ``path`` (memory-mapped: tensors are read when touched)."""
    from gguf import GGUFReader

    p = Path(path).expanduser()
    if not p.is_file():
        raise bad_argument(name, str(path), f"an existing file ({what})", "Check the path.")
    try:
        return GGUFReader(p)
    except Exception as exc:  # the reader raises ValueError / struct errors on anything but GGUF
        raise bad_argument(name, str(path), f"{what} ({type(exc).__name__}: {exc})",
                           "Pass a .gguf file written by llama.cpp, repeng, transformers' tools or steerformer.") from None


def field_value(reader: Any, key: str) -> Any:
    """The value of metadata ``key`` (str, number, or list for arrays); None when absent."""
    field = reader.get_field(key)
    return None if field is None else field.contents()


def is_steerformer_file(path: Path) -> bool:
    try:
        return field_value(open_gguf(path), WRITTEN_BY) is not None
    except Exception:  # not a readable GGUF: certainly not ours
        return False


def check_target_file(path: str | os.PathLike, overwrite: bool, name: str = "path", suffix: str = ".gguf") -> Path:
    """The file a writer may create: ``suffix``, in a folder that exists; an existing file only with
    ``overwrite`` and only when steerformer wrote it."""
    target = Path(path).expanduser()
    if target.suffix != suffix:
        raise bad_argument(name, str(path), f"a file name ending in {suffix}", f"Name the file e.g. out{suffix}.")
    if not target.parent.is_dir():
        raise bad_argument(name, str(path), "a file in an existing folder", "Create the folder first.")
    if target.exists():
        if target.is_dir() or not is_steerformer_file(target):
            raise bad_argument(name, str(path), "a new file (this one was not written by steerformer, and "
                               "steerformer never replaces such a file)", "Pass a new file name.")
        if not overwrite:
            raise bad_argument(name, str(path), "a new file (it holds an earlier steerformer output)",
                               "Pass overwrite=True to replace it.")
    return target


__all__ = ["WRITTEN_BY", "check_target_file", "field_value", "is_steerformer_file", "open_gguf"]
