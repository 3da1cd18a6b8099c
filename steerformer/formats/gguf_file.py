"""A GGUF file as steerformer reads and writes it: open one with a one-line error, read a metadata
value, and decide whether a target file may be written.

Every GGUF steerformer writes carries the key :data:`WRITTEN_BY` (llama.cpp, Ollama and
transformers ignore keys they do not know), so that ``overwrite=True`` replaces only a file
steerformer wrote earlier — never a model or a vector someone else made.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Iterable

from ..errors import FileFormatError, bad_argument
from ..files import check_regular
from ..outputs import OutputFile, check_output_file, in_plain_words

WRITTEN_BY = "steerformer.written_by"


def open_gguf(path: str | os.PathLike, name: str = "path", what: str = "a GGUF file") -> Any:
    """``gguf.GGUFReader`` on ``path`` (memory-mapped: tensors are read when touched)."""
    from gguf import GGUFReader

    p = Path(path).expanduser()
    if not p.is_file():
        raise bad_argument(name, str(path), f"an existing file ({what})", "Check the path.")
    try:
        check_regular(p)  # a FIFO or a link to /dev/zero: refused before the reader maps it
    except FileFormatError as exc:
        raise bad_argument(name, str(path), f"{what}, a regular file ({exc})", "Pass a .gguf file.") from None
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


def check_written(path: Path) -> None:
    """Read back the GGUF just written to ``path`` (headers only; tensors are memory-mapped): gguf's
    writer loses the error of a short write (numpy's ``tofile`` past ``ulimit -f`` or a full disk
    leaves a file cut short, in silence), so a file whose tensors do not fit is an OSError here —
    EFBIG at the size limit, ENOSPC on a full file system, else EIO."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        cut = end > path.stat().st_size
    except (ValueError, IndexError, OSError, EOFError):  # the reader's own errors for a file cut short
        cut = True
    if cut:  # the size limit or a full file system when that is what cut it (outputs.in_plain_words)
        raise in_plain_words(OSError(errno.EIO, "the GGUF file was cut short while writing", str(path)), path)


#: A GGUF file steerformer wrote (it carries :data:`WRITTEN_BY`).
GGUF_OUTPUT = OutputFile("steerformer GGUF", is_steerformer_file)


def check_target_file(path: str | os.PathLike, overwrite: bool, name: str = "path", suffix: str = ".gguf",
                      inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """The file a writer may create: ``suffix``, and the output-file rules of
    :func:`steerformer.outputs.check_output_file` (a folder that exists and can be written, never an
    input; an existing file only with ``overwrite`` and only when steerformer wrote it)."""
    if Path(path).expanduser().suffix != suffix:
        raise bad_argument(name, str(path), f"a file name ending in {suffix}", f"Name the file e.g. out{suffix}.")
    return check_output_file(path, GGUF_OUTPUT, overwrite=overwrite, inputs=inputs, name=name)
