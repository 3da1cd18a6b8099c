"""The one result protocol: every result type writes, reads, draws and summarizes itself the same way.

A result type implements

- ``to_dict() -> dict``: plain JSON-ready data (the content of its main JSON file);
- ``to_json(path=None) -> str``: that dict as JSON text, also written to ``path`` when given;
- ``save(dir, *, plots=True) -> dict[str, Path]``: every file it writes into folder ``dir``
  (JSON, NPZ/CSV where it has arrays or tables, and its figures unless ``plots=False``), by role;
- ``classmethod load(dir)``: the result back from what ``save`` wrote (``load(save(x))`` has the
  same ``to_dict()`` and the same arrays as ``x``);
- ``plot(dir) -> list[Path]``: its figures, as PNG files in ``dir`` (none for results without one);
- ``summary() -> str``: one or a few lines for a terminal.

This module also holds the pieces every result shares: the one JSON encoder (:func:`to_jsonable`,
:func:`json_text`: NaN/inf → ``null``, numpy scalars and arrays, complex numbers as ``[re, im]``,
paths as strings), the one version key (:data:`VERSION_KEY`, read back by :func:`version_of`, which
also knows the old key) and the one figure saver (:func:`save_figure`, :data:`FIGURE_DPI`).

No heavy import at module level: matplotlib, numpy and torch objects are recognized without
importing their packages.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable

from .errors import FileFormatError
from .files import read_regular

#: The key under which every result records the steerformer version that wrote it.
VERSION_KEY = "steerformer_version"
#: Keys older files used for the same thing (read, never written).
OLD_VERSION_KEYS = ("steerformer",)
#: Resolution of every PNG figure steerformer writes.
FIGURE_DPI = 130
#: Method names of the protocol (checked by tests/test_protocol.py on every public result type).
PROTOCOL_METHODS = ("to_dict", "to_json", "save", "load", "plot", "summary")


@runtime_checkable
class ResultProtocol(Protocol):
    """What every steerformer result type implements (see the module docstring)."""

    def to_dict(self) -> dict: ...

    def to_json(self, path: str | os.PathLike | None = None) -> str: ...

    def save(self, out_dir: str | os.PathLike, *, plots: bool = True) -> dict[str, Path]: ...

    @classmethod
    def load(cls, out_dir: str | os.PathLike) -> "ResultProtocol": ...

    def plot(self, out_dir: str | os.PathLike) -> list[Path]: ...

    def summary(self) -> str: ...


class JsonResult:
    """The part of the protocol every result type shares: :meth:`to_json` of its ``to_dict``."""

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """JSON text of ``to_dict()`` (NaN as null); also written to ``path`` when given."""
        return json_text(self.to_dict(), path)


def to_jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON data: dicts (string keys), lists, str, int, float, bool, None.

    NaN and ±inf become ``None`` (JSON has neither); numpy and torch scalars become Python numbers;
    arrays and tensors become nested lists; complex numbers become ``[re, im]``; paths and any other
    object become their ``str``.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, complex):
        return [to_jsonable(obj.real), to_jsonable(obj.imag)]
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    module = type(obj).__module__.split(".")[0]
    if module == "numpy":
        if hasattr(obj, "tolist"):  # ndarray and numpy scalars (np.float64, np.bool_, np.complex128 ...)
            return to_jsonable(obj.tolist())
    if module == "torch" and hasattr(obj, "tolist") and hasattr(obj, "detach"):  # a tensor, not a dtype
        return to_jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, (set, frozenset)):
        return [to_jsonable(v) for v in sorted(obj, key=repr)]
    return str(obj)


def json_text(obj: Any, path: str | os.PathLike | None = None) -> str:
    """The one JSON writer: ``obj`` through :func:`to_jsonable`, indented; also written to ``path``."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False, ensure_ascii=False)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text


#: No JSON file steerformer reads (configs, shard indexes, safetensors headers, records, results)
#: nests deeper than a handful of levels. Deeper input is refused as one error, before Python's
#: recursive decoder — or any recursive walk over the value afterwards — can run out of stack.
MAX_JSON_DEPTH = 64


class _KeyTwice(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs_once(pairs: list) -> dict:
    seen: dict = {}
    for k, v in pairs:
        if k in seen:
            raise _KeyTwice(k)
        seen[k] = v
    return seen


def parse_json(text: str | bytes, where: str | os.PathLike, *, unique_keys: bool = False) -> Any:
    """The one JSON reader: ``text`` decoded, or a :class:`~steerformer.errors.FileFormatError`
    naming ``where`` when it does not parse or nests deeper than :data:`MAX_JSON_DEPTH`;
    ``unique_keys``: an object that gives one key twice is refused too (Python keeps the last one
    in silence; for a file written by people, which one was meant is not known)."""
    def bad(reason: str) -> FileFormatError:
        err = FileFormatError(f"{where} is {reason}. Replace the file.")
        err.reason = reason
        return err

    too_deep = bad(f"nested more than {MAX_JSON_DEPTH} levels deep (no file steerformer or transformers writes "
                   "that: corrupt or hostile)")
    try:
        value = json.loads(text, object_pairs_hook=_pairs_once if unique_keys else None)
    except RecursionError:
        raise too_deep from None
    except _KeyTwice as exc:
        raise bad(f"an object that gives the key {exc.key[:60]!r} twice (which value counts is ambiguous)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"not valid JSON ({str(exc).splitlines()[0][:160]})") from None
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:  # the depth of what parsed (iteratively: a recursive walk could overflow itself)
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise too_deep
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return value


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file (written by :func:`json_text`, or any other) through :func:`parse_json`."""
    return parse_json(read_regular(path), path)  # a FIFO or /dev/zero: one error, never a hang


def version_of(meta: Mapping) -> str | None:
    """The steerformer version recorded in ``meta`` under :data:`VERSION_KEY` or an old key."""
    for key in (VERSION_KEY, *OLD_VERSION_KEYS):
        if isinstance(meta.get(key), str):
            return meta[key]
    return None


def save_table(result: Any, out_dir: str | os.PathLike, stem: str, *, plots: bool = True) -> dict[str, Path]:
    """``STEM.json`` (``result.to_json``), ``STEM.csv`` (``result.csv_text()``) and, with ``plots``,
    ``result.plot``'s figures in ``out_dir``: the ``save`` of a result that is one table."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {"json": out / f"{stem}.json", "csv": out / f"{stem}.csv"}
    result.to_json(written["json"])
    written["csv"].write_text(result.csv_text())
    if plots:
        written.update({p.stem: p for p in result.plot(out)})
    return written


def save_figure(fig: Any, path: str | os.PathLike, *, tight: bool = True) -> Path:
    """The one figure saver: PNG at :data:`FIGURE_DPI` (parent folder created); returns the path.

    ``fig`` is a ``matplotlib.figure.Figure`` (object-oriented matplotlib only, never pyplot).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=FIGURE_DPI, **({"bbox_inches": "tight"} if tight else {}))
    return path


def missing_methods(cls: type) -> list[str]:
    """Protocol methods ``cls`` lacks (``load`` must be a classmethod); empty when it conforms."""
    out = [m for m in PROTOCOL_METHODS if not callable(getattr(cls, m, None))]
    if "load" not in out and not isinstance(inspect.getattr_static(cls, "load"), classmethod):
        out.append("load (not a classmethod)")
    return out


__all__ = [
    "FIGURE_DPI", "JsonResult", "OLD_VERSION_KEYS", "PROTOCOL_METHODS", "ResultProtocol", "VERSION_KEY", "json_text",
    "MAX_JSON_DEPTH", "missing_methods", "parse_json", "read_json", "save_figure", "to_jsonable", "version_of",
]
