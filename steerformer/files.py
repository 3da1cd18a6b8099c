"""Reading a file someone else named — a user's flag, a checkpoint's side file — without hanging or
filling memory, and copying a checkpoint's side files without taking anything from outside it.

- :func:`open_regular` opens with ``O_NONBLOCK`` (a FIFO with no writer would block ``open``
  forever) and checks, on the open descriptor, that it is a regular file of bounded size: a FIFO,
  a device (``/dev/zero`` reads without end), a folder or a link to any of them is one error
  naming the file, before a byte is read. :func:`read_regular` reads such a file whole;
  :func:`read_prefix` reads at most a few bytes of one (the "is this our earlier output?" checks).
- :func:`check_regular` is the same check for a path handed to another library (safetensors,
  ``torch.load``, ``np.load``, gguf) that opens it itself.
- :func:`copy_side_files` copies files of a checkpoint folder into an output: each must resolve,
  after symlinks, to a regular file inside the checkpoint (or its Hugging Face cache blobs) and be
  of bounded size — a link to a file outside, to ``/dev/zero``, or a FIFO is refused in one line.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Callable, Iterable

from .errors import CheckpointError, FileFormatError

#: The largest JSON/text file steerformer reads whole (configs, records, run.json, prompts...).
MAX_TEXT_BYTES = 256 << 20
#: The largest side file (tokenizer, card, module config...) copied from a checkpoint into an output.
MAX_SIDE_FILE_BYTES = 2 << 30
#: Bytes read to recognize an earlier output of steerformer (a record's JSON, a figure's metadata).
PREFIX_BYTES = 1 << 20

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO (named pipe)", "a folder", ...), for
    the one-line refusal of anything but a regular file (which reads "not a regular file")."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _refuse(path: os.PathLike | str, why: str, what: str | None) -> FileFormatError:
    return FileFormatError(f"{what + ' ' if what else ''}{path} is {why}; steerformer reads only regular files "
                           "(never a FIFO, a device or a link to one, which would hang or read without end). "
                           "Pass a plain file.")


def _check_stat(st: os.stat_result, path, max_bytes: int | None, what: str | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, file_kind(st.st_mode), what)
    if max_bytes is not None and st.st_size > max_bytes:
        raise FileFormatError(f"{what + ' ' if what else ''}{path} is {st.st_size} bytes, more than the "
                              f"{max_bytes} bytes such a file can have; it is not the file steerformer expects. "
                              "Pass the right file.")


def check_regular(path: str | os.PathLike, *, max_bytes: int | None = None, what: str | None = None) -> Path:
    """``path`` (symlinks followed) must be a regular file of at most ``max_bytes``; returns it."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise FileFormatError(f"{what + ' ' if what else ''}{path} cannot be read ({exc.strerror or exc}).") from None
    _check_stat(st, path, max_bytes, what)
    return Path(path)


def open_regular(path: str | os.PathLike, *, max_bytes: int | None = None, what: str | None = None):
    """A binary file object of ``path``, checked on its descriptor (see the module doc)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileFormatError(f"{what + ' ' if what else ''}{path} cannot be read ({exc.strerror or exc}).") from None
    try:
        _check_stat(os.fstat(fd), path, max_bytes, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, *, max_bytes: int = MAX_TEXT_BYTES, what: str | None = None) -> bytes:
    """The bytes of ``path``, a regular file of at most ``max_bytes``."""
    with open_regular(path, max_bytes=max_bytes, what=what) as f:
        return f.read(max_bytes + 1)[:max_bytes]


def read_prefix(path: str | os.PathLike, n: int = PREFIX_BYTES) -> bytes | None:
    """At most ``n`` bytes from the start of ``path``; None when it is no readable regular file."""
    try:
        with open_regular(path) as f:
            return f.read(n)
    except (FileFormatError, OSError):
        return None


def sha256_of(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in chunks through :func:`open_regular` (a FIFO or a link to
    /dev/zero is one error, never a hang)."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_root() -> Path:
    """Where converted GGUFs live: $STEERFORMER_CACHE, else $XDG_CACHE_HOME/steerformer, else
    ~/.cache/steerformer."""
    if env := os.environ.get("STEERFORMER_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "steerformer"


# ---- copying a checkpoint's side files -------------------------------------------------------------
def checked_side_file(root: Path, file: Path, allowed: Iterable[Path], *, max_bytes: int = MAX_SIDE_FILE_BYTES) -> Path:
    """``file`` (under checkpoint folder ``root``) resolved after symlinks; a CheckpointError unless it is
    a regular file of at most ``max_bytes`` inside one of the ``allowed`` folders."""
    try:
        resolved = Path(file).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"{file} (in the checkpoint {root}) cannot be resolved ({exc}); refusing to copy it.") \
            from None
    allowed = [Path(a).resolve() for a in allowed]
    if not any(resolved == a or a in resolved.parents for a in allowed):
        raise CheckpointError(f"{file} (in the checkpoint {root}) is a link to {resolved}, outside the checkpoint; "
                              "refusing to copy it into the output (a checkpoint may only carry its own files). "
                              "Replace the link by the file it should hold.")
    st = os.stat(resolved)
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{file} (in the checkpoint {root}) is {file_kind(st.st_mode)}, not a regular file; "
                              "refusing to copy it (a FIFO would hang, a device would copy without end). Remove it.")
    if st.st_size > max_bytes:
        raise CheckpointError(f"{file} (in the checkpoint {root}) is {st.st_size} bytes, more than the {max_bytes} a "
                              "side file may have; refusing to copy it.")
    return resolved


def side_files(root: Path, folder: Path, allowed: Iterable[Path], *,
               skip: Callable[[Path], bool] = lambda rel: False) -> list[tuple[Path, Path]]:
    """(relative path, checked source file) for every file under ``folder`` (inside checkpoint ``root``),
    walked without following links to folders; every entry is checked by :func:`checked_side_file`
    unless ``skip(relative path)``. A link to a folder is refused like a link to a file outside."""
    allowed = list(allowed)
    out = []
    start = Path(folder)
    if start.is_symlink() or not start.is_dir():
        entries = [start]
    else:
        entries = []
        for dirpath, dirnames, filenames in os.walk(start):  # followlinks=False
            # a link to a folder is judged below: it is no file
            entries += [Path(dirpath) / n for n in sorted(dirnames) if os.path.islink(os.path.join(dirpath, n))]
            entries.extend(Path(dirpath) / n for n in sorted(filenames))
    for p in entries:
        rel = p.relative_to(root)
        if skip(rel):
            continue
        if p.is_symlink() and p.is_dir():
            raise CheckpointError(f"{p} (in the checkpoint {root}) is a link to the folder {p.resolve()}; refusing to "
                                  "copy through it. Replace the link by the files it should hold.")
        out.append((rel, checked_side_file(root, p, allowed)))
    return out


def copy_side_file(src: Path, dst: Path) -> None:
    """Copy a file checked by :func:`checked_side_file` (re-checked on the open descriptor)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open_regular(src, max_bytes=MAX_SIDE_FILE_BYTES) as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


__all__ = ["MAX_TEXT_BYTES", "MAX_SIDE_FILE_BYTES", "PREFIX_BYTES", "check_regular", "open_regular", "read_regular",
           "read_prefix", "cache_root", "checked_side_file", "side_files", "copy_side_file", "file_kind", "sha256_of"]
