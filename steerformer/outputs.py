"""Where steerformer may write: the one guard for every output folder, and the atomic folder write.

Rules (checked before any model is loaded, and again just before writing):

- an output folder is never an input (the checkpoint, a direction folder, a prompts file...), never
  inside one and never contains one — the inputs a writer is given and, while a command runs, every
  file and folder named on its command line (:func:`command_inputs`), so no writer can miss one;
- it is never the current directory or one of its ancestors;
- a non-empty folder is replaced only when it is an earlier output of the same kind of command
  (see :data:`KINDS` for what marks each kind) — ``overwrite`` never deletes anything else;
- it is written into a hidden temporary sibling ``.NAME.tmp-PID-XXXX`` and moved into place, so a
  crash or ``kill -9`` leaves either the old folder or the new one, never a mix. Temporaries
  of dead writers of the same target are removed by the next command that checks or reads that
  path; an old folder that an interrupted overwrite had moved aside (``.NAME.old-PID-XXXX``) is
  moved back and the user is told;
- folders and files get the user's umask (like ``save_pretrained``), not ``mkdtemp``'s 0700.

A single output file (``steer --record``, ``plot-collapse --out``) follows the same rules
(:func:`check_output_file`): never inside an input checkpoint, never an input file, never inside
the command's own output folder; an existing file is replaced only when it is an earlier output of
the same kind (:class:`OutputFile` says how to recognize one) — and, for ``steer --record``, with
``overwrite`` — and it is written through a hidden temporary sibling moved into place.

A write that fails (disk full, permission, I/O error — also from safetensors' Rust writer) is one
error naming the output and what was left (:func:`write_failed`): nothing, for the atomic writes.
Every writer's failure is judged by what it left, not only by its words: a temporary that has grown
to the process's file-size limit (:func:`past_size_limit`) was cut there, whatever the writer said
(numpy's "4096 requested and 1888 written", torch.save's "unexpected pos 768 vs 662"), and a write
that failed with its file system (nearly) full failed for want of room.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .errors import FileFormatError, InvalidArgumentError, bad_argument
from .files import cache_root, file_kind, open_regular, read_prefix
from .results import parse_json
from .version import __version__

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class OutputKind:
    """What a command writes: ``markers`` are relative paths, any of which marks a folder as an
    earlier output of this kind; ``stamp`` (optional) is a small file written into every new
    output so that it carries a marker even when the content itself has none."""

    command: str
    markers: tuple[str, ...]
    stamp: str | None = None


#: The output kinds of the commands. A folder holding none of a kind's markers is not "ours".
STEERED = OutputKind("steer", ("steerformer/record.json", ".steerformer-unsteer.json"))
UNSTEERED = OutputKind("unsteer", (".steerformer-unsteer.json", "steerformer/record.json"),
                       stamp=".steerformer-unsteer.json")
ANALYZE = OutputKind("analyze", ("report.json",))
SIMULATE = OutputKind("simulate", ("result.json",))
COLLAPSE = OutputKind("collapse", ("run.json", "collapse.npz", "collapse.json"))
#: a sweep in progress is marked by its plan, written before the first task runs
SWEEP = OutputKind("sweep", ("sweep.json", "tasks/plan.json"))
#: a shareable direction (``steering.Direction.save``)
DIRECTION = OutputKind("direction", ("direction.json",))
#: a steering evaluation (``steering.SteeringEvaluation.save``)
EVALUATE = OutputKind("evaluate", ("evaluation.json",))
KINDS = {k.command: k for k in (STEERED, UNSTEERED, ANALYZE, SIMULATE, COLLAPSE, SWEEP, DIRECTION, EVALUATE)}

_TMP, _OLD = ".tmp-", ".old-"


def is_own_output(folder: Path, kind: OutputKind) -> bool:
    return any((folder / m).is_file() for m in kind.markers)


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _resolve(p: str | os.PathLike) -> Path:
    return Path(p).expanduser().resolve()


@contextlib.contextmanager
def path_errors(name: str, shown: str) -> Iterator[None]:
    """A path the file system cannot hold or follow — a name longer than it allows (ENAMETOOLONG), a
    symlink loop (ELOOP; ``resolve`` raises RuntimeError before Python 3.13) — is one line naming ``name``."""
    try:
        yield
    except RuntimeError as exc:
        if "loop" not in str(exc).lower():
            raise
        raise bad_argument(name, shown, "a path without a symlink loop", "Pick another path.") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise bad_argument(name, shown, "a path the file system can hold (a name is longer than it allows, "
                               "255 bytes on most)", "Pick a shorter name.") from None
        if exc.errno == errno.ELOOP:
            raise bad_argument(name, shown, "a path without a symlink loop", "Pick another path.") from None
        raise


def check_output_folder(out: str | os.PathLike, kind: OutputKind, *, overwrite: bool = False,
                        inputs: Iterable[str | os.PathLike | None] = (), name: str = "--out",
                        incremental: bool = False) -> Path:
    """Refuse (``InvalidArgumentError``, one line; a path the file system cannot hold or follow too,
    :func:`path_errors`) an output folder that breaks a rule of the module doc; return it resolved.
    ``inputs``: checkpoint folders read by the command (strings that are not existing folders, e.g.
    Hub ids, are ignored). ``incremental``: the command adds to a folder of its own kind in place
    (collapse), so such a folder needs no ``overwrite``."""
    shown = str(out)
    with path_errors(name, shown):
        target = _resolve(out)
        clean_stale(target)  # an output an interrupted overwrite left aside is back first: the rules apply to it
        if target.exists() and not target.is_dir():
            raise bad_argument(name, shown, "a folder path (this path is a file)", "Pass a new folder name.")
        cwd = Path.cwd().resolve()
        if _is_within(cwd, target):
            what = "the current directory" if target == cwd else "an ancestor of the current directory"
            raise bad_argument(name, shown, f"a folder of its own, not {what}",
                               "Pass a new sub-folder such as runs/out.")
        for inp in _existing(inputs):
            if _is_within(target, inp) or _is_within(inp, target):
                rel = "is" if target == inp else ("is inside" if _is_within(target, inp) else "contains")
                what = _input_word(inp).removesuffix(" of this command")
                raise bad_argument(name, shown, f"a folder apart from {what} (it {rel} {inp})",
                                   f"Pass a folder outside {what}.")
        if target.is_dir() and any(target.iterdir()):
            if not is_own_output(target, kind):
                raise bad_argument(
                    name, shown, f"an empty or new folder: it holds files that are not a steerformer {kind.command} "
                    f"output (none of {', '.join(kind.markers)}), and steerformer never replaces those",
                    "Pass a new folder name.")
            if not overwrite and not incremental:
                raise bad_argument(name, shown, f"an empty or new folder (it holds an earlier {kind.command} output)",
                                   "Pass overwrite=True (CLI: --overwrite) to replace it.")
        try:
            _check_writable(target)
        except OSError as exc:
            raise bad_argument(name, shown, f"a folder that can be written ({exc.strerror or exc})",
                               "Pick a folder you have write permission for.") from None
        return target


#: The files and folders the running command reads (:func:`command_inputs`).
_COMMAND_INPUTS: contextvars.ContextVar[tuple] = contextvars.ContextVar("steerformer_command_inputs", default=())


@contextlib.contextmanager
def command_inputs(paths: Iterable[str | os.PathLike | None]) -> Iterator[None]:
    """Inside the ``with``, every output check (:func:`check_output_folder`, :func:`check_output_file`,
    so every writer) also keeps apart from ``paths``: what the running command reads (the CLI enters
    it for each command with every path on its command line). Strings that are no existing path
    (Hub ids, words) are ignored."""
    token = _COMMAND_INPUTS.set((*_COMMAND_INPUTS.get(), *paths))
    try:
        yield
    finally:
        _COMMAND_INPUTS.reset(token)


def _existing(paths: Iterable[str | os.PathLike | None]) -> list[Path]:
    """The paths that exist, resolved (a Hub id or a name that is no path is skipped), with the
    running command's inputs (:func:`command_inputs`)."""
    out = []
    for p in (*paths, *_COMMAND_INPUTS.get()):
        if p is not None and str(p) != "" and Path(p).expanduser().exists():
            r = _resolve(p)
            if r not in out:
                out.append(r)
    return out


def _input_word(inp: Path) -> str:
    """How an input is named in a refusal: a checkpoint, another folder, or a file."""
    if not inp.is_dir():
        return "an input file of this command"
    return "the input checkpoint" if (inp / "config.json").exists() else "the input folder"


def _check_writable(target: Path) -> None:
    """The output's place must be writable: the folder itself when it exists (a read-only output
    folder means "do not write here", though replacing it needs only its parent), and the nearest
    existing ancestor, where a new folder or the temporary sibling goes. Probed by making a folder:
    root passes ``os.access`` everywhere."""
    p = target.parent
    while not p.exists():
        p = p.parent
    for q in ([target] if target.is_dir() else []) + [p]:
        if not q.is_dir():
            raise NotADirectoryError(20, "a parent is a file", str(q))
        if not os.access(q, os.W_OK | os.X_OK):
            raise PermissionError(13, f"no write permission for {q}", str(q))
        os.rmdir(tempfile.mkdtemp(prefix=".steerformer-write-probe-", dir=q))


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: Path, *, directory: bool) -> None:
    """Give ``path`` the mode a plain ``mkdir``/``open`` would have (mkdtemp/mkstemp use 0700/0600)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def _normalize_modes(root: Path) -> None:
    """Files written through temporaries (safetensors, mkstemp) come out 0600: give every file and
    folder of a finished output the mode the umask gives a plain ``open``/``mkdir``."""
    mask = current_umask()
    os.chmod(root, 0o777 & ~mask)
    for p in root.rglob("*"):
        if not p.is_symlink():
            os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        pass
    return True


def _leftovers(target: Path, tag: str) -> list[tuple[Path, int | None]]:
    """Siblings ``.NAME<tag>PID-XXXX`` (or the older ``.NAME<tag>XXXX``) with the writer's pid."""
    out = []
    prefix = f".{target.name}{tag}"
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return out
    for p in entries:
        if p.name.startswith(prefix):
            m = re.match(r"(\d+)-", p.name[len(prefix):])
            out.append((p, int(m.group(1)) if m else None))
    return out


def clean_stale(target: str | os.PathLike) -> list[str]:
    """Remove temporaries of dead writers of ``target``; move back an old output that an interrupted
    overwrite left aside while ``target`` is missing. Returns one message per action (also logged)."""
    target = _resolve(target)
    notes = []
    for p, pid in _leftovers(target, _TMP):
        if pid is None or not _pid_alive(pid):
            folder = p.is_dir() and not p.is_symlink()
            if folder:
                shutil.rmtree(p, ignore_errors=True)
            else:  # a single-file output's temporary (an export's .gguf): a file, never followed
                with contextlib.suppress(OSError):
                    p.unlink()
            notes.append(f"removed {p}, the temporary {'folder' if folder else 'file'} of an interrupted write "
                         f"to {target}")
    for p, pid in _leftovers(target, _OLD):
        if pid is not None and _pid_alive(pid):
            continue
        # older versions moved the previous output to .NAME.old-XXXX/x
        moved = p / "x" if pid is None and (p / "x").is_dir() else p
        if not target.exists() and moved.is_dir():
            os.replace(moved, target)
            if moved != p:
                shutil.rmtree(p, ignore_errors=True)
            notes.append(f"an interrupted overwrite had left the previous output in {p}; it is back in {target}")
        else:
            shutil.rmtree(p, ignore_errors=True)
            notes.append(f"removed {p}, the previous output already replaced by {target}")
    for n in notes:
        log.warning(n)
    return notes


def _sibling(target: Path, tag: str) -> Path:
    return target.parent / f".{target.name}{tag}{os.getpid()}-{secrets.token_hex(4)}"


_LOCK = ".lock"
#: The (thread, target) pairs whose writer lock is held: an export holds it around its whole work, and
#: the writer it calls, in the same thread, takes it again (flock would refuse a second descriptor of
#: the same process); another thread of the process is a second writer, refused or waiting as any.
_HELD: set[tuple[int, Path]] = set()


@contextlib.contextmanager
def writer_lock(target: Path, name: str, shown: str, *, wait: bool) -> Iterator[None]:
    """One writer at a time per output: an exclusive ``flock`` on a lock file named by the hash of the
    target's resolved path, in steerformer's cache (``<cache>/locks``; nothing is added beside the
    output), held from the last check of the rules to the final rename, then removed. A second
    writer without ``wait`` (no ``overwrite``) is refused in one line; with ``wait`` it writes after
    the first has finished, so the last complete output wins and nothing is mixed. The kernel
    releases the lock of a killed writer; a lock file it leaves behind is reused. Where the cache
    cannot be written, the lock is a hidden sibling ``.NAME.lock``. (No ``fcntl``: no lock.)"""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    held = (threading.get_ident(), target)
    if held in _HELD:  # already this thread's (an export around its writer): held until the outer one ends
        yield
        return
    locks = cache_root() / "locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
        lock = locks / (hashlib.sha256(str(target).encode("utf-8", "surrogateescape")).hexdigest() + _LOCK)
    except OSError:
        lock = target.parent / f".{target.name}{_LOCK}"
    try:  # a link or a folder in its place is not ours to open or remove: refused before any work
        mode = os.lstat(lock).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise bad_argument(name, shown, f"an output whose lock file {lock} is a regular file (it is {file_kind(mode)})",
                           f"Remove {lock} (rm -r) if no steerformer command is running, then rerun.")
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0),
                         0o666 & ~current_umask())
        except OSError as exc:
            raise bad_argument(name, shown, f"a place that can be written ({exc.strerror or exc})",
                               "Pick a folder you have write permission for.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise bad_argument(name, shown, "an output no other command is writing (another steerformer command is "
                               "writing it right now)", "Wait for it to finish, pick another name, or pass "
                               "overwrite=True (CLI: --overwrite) to replace its output once it is done.") from None
        try:  # the previous holder may have removed the file between our open and our lock: lock the new one
            same = os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    _HELD.add(held)
    try:
        yield
    finally:
        _HELD.discard(held)
        with contextlib.suppress(OSError):
            os.unlink(lock)  # while still held: a writer waiting on this file re-opens the path
        os.close(fd)


def write_atomically(directory: str | os.PathLike, fill: Callable[[Path], object], *, overwrite: bool = False,
                     kind: OutputKind = STEERED, inputs: Iterable[str | os.PathLike | None] = (),
                     name: str = "directory") -> Path:
    """Create a temporary sibling folder, ``fill(tmp)`` it, then move it to ``directory``. On any
    error the temporary folder is removed and ``directory`` is left as it was. ``directory`` must
    pass :func:`check_output_folder`; ``overwrite`` replaces an earlier output of ``kind`` only."""
    # the rules (they also clean up, clean_stale); the resolved target, or one line for a path loop
    target = check_output_folder(directory, kind, overwrite=overwrite, inputs=inputs, name=name)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise bad_argument(name, str(directory), f"a folder that can be written ({exc.strerror or exc})",
                           "Pick a folder you have write permission for.") from None
    with writer_lock(target, name, str(directory), wait=overwrite):
        # the rules again, under the lock: another writer may have finished since the check above
        check_output_folder(directory, kind, overwrite=overwrite, inputs=inputs, name=name)
        return _write_folder(target, directory, fill, kind, name)


def _write_folder(target: Path, directory: str | os.PathLike, fill: Callable[[Path], object], kind: OutputKind,
                  name: str) -> Path:
    try:
        tmp = _sibling(target, _TMP)
        tmp.mkdir()  # mkdir, not mkdtemp: the user's umask, not 0700
    except OSError as exc:
        raise bad_argument(name, str(directory), f"a folder that can be written ({exc.strerror or exc})",
                           "Pick a folder you have write permission for.") from None
    try:
        try:
            fill(tmp)
        except Exception as exc:  # a full disk, also from safetensors' writer: one line, nothing left
            exc = in_plain_words(exc, tmp)
            if is_write_failure(exc, tmp):
                raise write_failed(name, directory, exc, "Nothing was written (its temporary folder is removed).") \
                    from None
            raise
        if kind.stamp is not None and not (tmp / kind.stamp).exists():
            (tmp / kind.stamp).write_text(json.dumps({"written_by": f"steerformer {kind.command}",
                                                      "version": __version__}) + "\n")
        _normalize_modes(tmp)
        if target.exists():
            old = _sibling(target, _OLD)
            try:
                os.replace(target, old)  # same parent: no write permission on the folder itself needed
            except OSError as exc:
                raise bad_argument(name, str(directory), f"a folder that can be replaced ({exc.strerror or exc})",
                                   "Pick a folder you have write permission for.") from None
            try:
                os.replace(tmp, target)
            except BaseException:
                os.replace(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def write_file_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` a hidden sibling file ``.NAME.tmp-PID-XXXX``, then move it to ``path`` (user's
    umask). On any error the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    tmp = _sibling(path, _TMP)
    try:
        write(tmp)
        apply_umask(tmp, directory=False)
        os.replace(tmp, path)
    except Exception as exc:
        plain = in_plain_words(exc, tmp)  # judged before the temporary is removed
        if plain is not exc:
            raise plain from exc
        raise
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


#: Bytes in the file (its metadata) that mark a figure written by plot-collapse.
FIGURE_MARK = "steerformer plot-collapse"
#: Figure formats whose metadata matplotlib can write (and so carry :data:`FIGURE_MARK`).
MARKED_FIGURE_FORMATS = ("png", "pdf", "svg", "eps", "ps")


@dataclasses.dataclass(frozen=True)
class OutputFile:
    """What a command writes as a single file; ``is_ours(path)`` recognizes an earlier one."""

    command: str
    is_ours: Callable[[Path], bool]


#: No record steerformer writes is larger: a bigger file is not ours, and is never read whole.
_MAX_OWN_JSON = 64 << 20


def _is_steerformer_json(path: Path) -> bool:
    """Read through a bounded prefix only (a FIFO, a device or a huge file is not ours, and never
    hangs or fills memory): a JSON object whose ``format`` is a steerformer format."""
    try:
        with open_regular(path) as f:
            if os.fstat(f.fileno()).st_size > _MAX_OWN_JSON:  # too big to be ours: not read at all
                return False
            head = f.read(_MAX_OWN_JSON + 1)
    except (OSError, FileFormatError):
        return False
    if len(head) > _MAX_OWN_JSON or b'"steerformer.' not in head:
        return False
    try:
        doc = parse_json(head, path)
    except FileFormatError:
        return False
    return isinstance(doc, dict) and str(doc.get("format", "")).startswith("steerformer.")


def _is_marked_figure(path: Path) -> bool:
    """The mark is in the metadata: near the start (PNG, SVG, PS) or the end (a PDF's info dictionary);
    only those ends are read."""
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(1 << 20)
            f.seek(max(size - (1 << 20), 0))
            tail = f.read(1 << 20)
    except (OSError, InvalidArgumentError, ValueError):
        return False
    return FIGURE_MARK.encode() in head or FIGURE_MARK.encode() in tail


#: The tag in the head of every HTML page steerformer writes (``steerformer.report``): its mark.
REPORT_MARK = '<meta name=generator content="steerformer report">'


def _is_report_page(path: Path) -> bool:
    """A page ``steerformer report`` wrote: its head (the first 4 KiB) carries :data:`REPORT_MARK`."""
    head = read_prefix(path, 4096)
    return head is not None and REPORT_MARK.encode() in head


#: ``steer --record``: a steering record (JSON whose ``format`` is a steerformer format).
RECORD = OutputFile("steer --record", _is_steerformer_json)
#: ``plot-collapse --out``: a figure carrying :data:`FIGURE_MARK` in its metadata.
FIGURE = OutputFile("plot-collapse", _is_marked_figure)
#: ``report.html`` in an output folder (``steerformer.report``): a page carrying the generator mark.
REPORT_PAGE = OutputFile("report", _is_report_page)


def check_output_file(path: str | os.PathLike, kind: OutputFile, *, overwrite: bool = False,
                      inputs: Iterable[str | os.PathLike | None] = (), outputs: Iterable[str | os.PathLike | None] = (),
                      name: str = "path") -> Path:
    """Refuse (one line naming ``name``; a path the file system cannot hold or follow too,
    :func:`path_errors`) a file to write that breaks a rule of the module doc; return it resolved.
    ``inputs``: checkpoint folders and files the command reads; ``outputs``: folders it writes (a file
    inside one would be replaced with it); ``overwrite``: an earlier output of ``kind`` may be replaced."""
    shown = str(path)
    with path_errors(name, shown):
        target = _resolve(path)
        if target.is_dir():
            raise bad_argument(name, shown, "a file path (this is a folder)",
                               f"Pass e.g. {Path(path) / 'record.json'}.")
        for inp in _existing(inputs):
            if _is_within(target, inp):
                what = f"inside {_input_word(inp)} {inp}" if inp.is_dir() else _input_word(inp)
                raise bad_argument(name, shown, f"a file apart from the inputs (it is {what})",
                                   f"Write it outside {'the inputs' if not inp.is_dir() else _input_word(inp)}.")
        for out in outputs:
            if out is not None and _is_within(target, _resolve(out)):
                raise bad_argument(name, shown, f"a file outside the output folder {out} (that folder is written as a "
                                   "whole and would replace it)", "Pick a path outside it.")
        parent = target.parent
        if not parent.is_dir():
            raise bad_argument(name, shown, f"a file in an existing folder ({parent} does not exist)",
                               f"Create it first (mkdir -p {parent}) or pick another path.")
        if target.exists() and not target.is_file():  # a FIFO, a device, a link to one: never opened
            raise bad_argument(name, shown, f"a regular file path (this is {file_kind(target.stat().st_mode)})",
                               "Pick a new file name.")
        if target.exists():
            if not os.access(target, os.W_OK):  # read-only: "do not replace", though its folder would allow it
                raise bad_argument(name, shown, "a file you may write (this one is read-only)", "Pick another path.")
            if not kind.is_ours(target):
                raise bad_argument(name, shown, f"a new file name: this file exists and is not an earlier "
                                   f"{kind.command} output (it was not written by steerformer), and steerformer never "
                                   "replaces such a file", "Pick a new name.")
            if not overwrite:
                raise bad_argument(name, shown, f"a new file name (this file holds an earlier {kind.command} output)",
                                   "Pass overwrite=True (CLI: --overwrite) to replace it.")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise bad_argument(name, shown, "a file in a folder you may write (permission denied)",
                               "Pick another path.")
        return target


def write_output_file(path: str | os.PathLike, write: Callable[[Path], object], kind: OutputFile, *,
                      overwrite: bool = False, inputs: Iterable[str | os.PathLike | None] = (),
                      outputs: Iterable[str | os.PathLike | None] = (), name: str = "path") -> Path:
    """:func:`check_output_file` (again, just before writing), then ``write(tmp)`` through
    :func:`write_file_atomically`; a failed write is one line and leaves ``path`` as it was."""
    target = check_output_file(path, kind, overwrite=overwrite, inputs=inputs, outputs=outputs, name=name)
    with writer_lock(target, name, str(path), wait=overwrite):
        # the rules again, under the lock: another writer may have finished since the check above
        check_output_file(path, kind, overwrite=overwrite, inputs=inputs, outputs=outputs, name=name)
        clean_stale(target)  # the temporary file of a writer killed mid-write
        try:
            return write_file_atomically(target, write)
        except Exception as exc:
            if is_write_failure(exc, target.parent):
                raise write_failed(name, path, exc, "Nothing was written.") from None
            raise


#: A write that fails with less room than this left on its filesystem failed for want of room,
#: whatever the writer said (torch.save's zip writer says "unexpected pos ...").
FULL_BELOW = 1 << 20


def past_size_limit(written: Path) -> bool:
    """Whether ``written`` (a file, or any file in a folder) has grown to the process's file-size
    limit (``ulimit -f``): the kernel writes up to the limit and then refuses, so a file cut by it is
    exactly that long — whatever its writer said, or if it said nothing at all."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows has no such limit
        return False
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft == resource.RLIM_INFINITY:
        return False
    try:
        if written.is_symlink() or not written.exists():
            return False
        files = [written] if written.is_file() else (p for p in written.rglob("*") if p.is_file() and not p.is_symlink())
        return any(f.stat().st_size >= soft for f in files)
    except OSError:
        return False


def in_plain_words(exc: BaseException, written: Path) -> BaseException:
    """``exc`` of a writer that was writing ``written`` (its temporary file or folder), said as the
    OSError it stands for when the writer used its own words: EFBIG when ``written`` reached the
    file-size limit (:func:`past_size_limit`), ENOSPC when the file system is (nearly) full; else
    ``exc`` itself."""
    if _disk_full(exc) or _too_large(exc):
        return exc
    if past_size_limit(written):
        return OSError(errno.EFBIG, "File too large", str(written))
    if _filesystem_full(written.parent):  # e.g. torch.save's "unexpected pos"
        return OSError(errno.ENOSPC, "No space left on device", str(written))
    return exc


def _filesystem_full(where: Path) -> bool:
    try:
        st = os.statvfs(where)
    except (OSError, AttributeError):  # no such folder (yet), or no statvfs (Windows)
        return False
    return st.f_bavail * st.f_frsize < FULL_BELOW


def is_write_failure(exc: BaseException, where: Path) -> bool:
    """Whether ``exc`` is a failure to write into ``where``: a full disk or quota, whatever raised it
    (safetensors' Rust writer raises its own error type; a filesystem left with less than
    :data:`FULL_BELOW` counts), or an OSError about a path there."""
    if _disk_full(exc) or _too_large(exc) or _filesystem_full(where):
        return True
    name = getattr(exc, "filename", None)
    return isinstance(exc, OSError) and name is not None and _is_within(_resolve(name), _resolve(where))


def _too_large(exc: BaseException) -> bool:
    """A file past the process's size limit (``ulimit -f``: Python ignores SIGXFSZ, so the write fails
    with EFBIG) or the file system's largest file — also as the Rust writers' own error."""
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return True
    return "File too large" in str(exc) or "os error 27" in str(exc)


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(exc) or "os error 28" in str(exc)  # Rust writers' own errors


def write_failed(name: str, value: object, exc: BaseException, left: str) -> InvalidArgumentError:
    """The one message for an output that could not be written: why, and what was ``left``."""
    full, large = _disk_full(exc), _too_large(exc)
    why = "no space left on the device" if full else "a file grew past the size limit (ulimit -f, or the file " \
        "system's largest file)" if large else (getattr(exc, "strerror", None) or str(exc).splitlines()[0][:160])
    fix = "Free some space or pick another disk." if full else \
        "Raise the limit (ulimit -f unlimited) or pick another disk." if large else "Pick another folder."
    return bad_argument(name, str(value), f"a place that can hold the output, but writing it failed: {why}",
                        f"{left} {fix}")


def safe_folder_name(name: str, default: str = "model") -> str:
    """One path component derived from a model name (its last part): no separators, no ``..``,
    never absolute. ``'org/model'`` → ``'model'``, ``'../x'`` → ``'x'``, ``'..'`` → ``default``."""
    parts = [p for p in str(name).replace("\\", "/").split("/") if p not in ("", ".", "..")]
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", parts[-1] if parts else "").strip(".")
    return s or default


__all__ = ["OutputKind", "KINDS", "STEERED", "UNSTEERED", "ANALYZE", "SIMULATE", "COLLAPSE", "check_output_folder",
           "write_atomically", "write_file_atomically", "writer_lock", "clean_stale", "is_own_output", "safe_folder_name",
           "apply_umask", "InvalidArgumentError", "OutputFile", "RECORD", "FIGURE", "FIGURE_MARK",
           "MARKED_FIGURE_FORMATS", "check_output_file", "write_output_file", "is_write_failure", "write_failed",
           "past_size_limit", "in_plain_words", "command_inputs"]
