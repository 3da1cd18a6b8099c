"""Where steerformer may write: the one guard for every output folder, and the atomic folder write.

Rules (checked before any model is loaded, and again just before writing):

- an output folder is never the input checkpoint, never inside it and never contains it;
- it is never the current directory or one of its ancestors;
- a non-empty folder is replaced only when it is an earlier output of the same kind of command
  (see :data:`KINDS` for what marks each kind) — ``overwrite`` never deletes anything else;
- it is written into a hidden temporary sibling ``.NAME.tmp-PID-XXXX`` and moved into place, so a
  crash or ``kill -9`` leaves either the old folder or the new one, never a mix. Temporaries
  of dead writers of the same target are removed on the next write; an old folder that an
  interrupted overwrite had moved aside (``.NAME.old-PID-XXXX``) is moved back and the user is told;
- folders and files get the user's umask (like ``save_pretrained``), not ``mkdtemp``'s 0700.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Callable, Iterable

from .errors import InvalidArgumentError, bad_argument

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
KINDS = {k.command: k for k in (STEERED, UNSTEERED, ANALYZE, SIMULATE, COLLAPSE, SWEEP, DIRECTION)}

_TMP, _OLD = ".tmp-", ".old-"


def is_own_output(folder: Path, kind: OutputKind) -> bool:
    return any((folder / m).is_file() for m in kind.markers)


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _resolve(p: str | os.PathLike) -> Path:
    return Path(p).expanduser().resolve()


def check_output_folder(out: str | os.PathLike, kind: OutputKind, *, overwrite: bool = False,
                        inputs: Iterable[str | os.PathLike | None] = (), name: str = "--out",
                        incremental: bool = False) -> Path:
    """Refuse (``InvalidArgumentError``, one line) an output folder that breaks a rule of the module
    doc; return it resolved. ``inputs``: checkpoint folders read by the command (strings that are
    not existing folders, e.g. Hub ids, are ignored). ``incremental``: the command adds to a
    folder of its own kind in place (collapse), so such a folder needs no ``overwrite``."""
    target = _resolve(out)
    shown = str(out)
    if target.exists() and not target.is_dir():
        raise bad_argument(name, shown, "a folder path (this path is a file)", "Pass a new folder name.")
    cwd = Path.cwd().resolve()
    if _is_within(cwd, target):
        what = "the current directory" if target == cwd else "an ancestor of the current directory"
        raise bad_argument(name, shown, f"a folder of its own, not {what}",
                           "Pass a new sub-folder such as runs/out.")
    for src in inputs:
        if src is None or str(src) == "" or not Path(src).expanduser().is_dir():
            continue
        inp = _resolve(src)
        if _is_within(target, inp) or _is_within(inp, target):
            rel = "is" if target == inp else ("is inside" if _is_within(target, inp) else "contains")
            raise bad_argument(name, shown, f"a folder apart from the input checkpoint (it {rel} {inp})",
                               "Pass a folder outside the input checkpoint.")
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


def _check_writable(target: Path) -> None:
    """The nearest existing ancestor must be a writable folder (that is where the folder goes)."""
    p = target if not target.exists() else target.parent
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        raise NotADirectoryError(20, "a parent is a file", str(p))
    if not os.access(p, os.W_OK | os.X_OK):
        raise PermissionError(13, f"no write permission for {p}", str(p))
    import tempfile

    os.rmdir(tempfile.mkdtemp(prefix=".steerformer-write-probe-", dir=p))  # root passes os.access everywhere


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
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
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
            shutil.rmtree(p, ignore_errors=True)
            notes.append(f"removed {p}, the temporary folder of an interrupted write to {target}")
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


def write_atomically(directory: str | os.PathLike, fill: Callable[[Path], object], *, overwrite: bool = False,
                     kind: OutputKind = STEERED, inputs: Iterable[str | os.PathLike | None] = (),
                     name: str = "directory") -> Path:
    """Create a temporary sibling folder, ``fill(tmp)`` it, then move it to ``directory``. On any
    error the temporary folder is removed and ``directory`` is left as it was. ``directory`` must
    pass :func:`check_output_folder`; ``overwrite`` replaces an earlier output of ``kind`` only."""
    target = _resolve(directory)
    check_output_folder(directory, kind, overwrite=overwrite, inputs=inputs, name=name)
    if clean_stale(target):  # an old output may be back in place: the rules apply to it
        check_output_folder(directory, kind, overwrite=overwrite, inputs=inputs, name=name)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _sibling(target, _TMP)
        tmp.mkdir()  # mkdir, not mkdtemp: the user's umask, not 0700
    except OSError as exc:
        raise bad_argument(name, str(directory), f"a folder that can be written ({exc.strerror or exc})",
                           "Pick a folder you have write permission for.") from None
    try:
        fill(tmp)
        if kind.stamp is not None and not (tmp / kind.stamp).exists():
            import json

            from . import __version__

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
    """``write(tmp)`` a hidden sibling file, then move it to ``path`` (user's umask)."""
    path = Path(path)
    tmp = path.parent / f".{path.name}{_TMP}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        write(tmp)
        apply_umask(tmp, directory=False)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def safe_folder_name(name: str, default: str = "model") -> str:
    """One path component derived from a model name (its last part): no separators, no ``..``,
    never absolute. ``'org/model'`` → ``'model'``, ``'../x'`` → ``'x'``, ``'..'`` → ``default``."""
    parts = [p for p in str(name).replace("\\", "/").split("/") if p not in ("", ".", "..")]
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", parts[-1] if parts else "").strip(".")
    return s or default


__all__ = ["OutputKind", "KINDS", "STEERED", "UNSTEERED", "ANALYZE", "SIMULATE", "COLLAPSE", "check_output_folder",
           "write_atomically", "write_file_atomically", "clean_stale", "is_own_output", "safe_folder_name",
           "apply_umask", "InvalidArgumentError"]
