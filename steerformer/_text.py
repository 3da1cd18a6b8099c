"""The one way results become JSON/CSV text: returned, and also written when a path is given."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Iterable, Sequence


def emit(text: str, path: str | Path | None) -> str:
    """Write ``text`` to ``path`` when one is given; return it either way."""
    if path is not None:
        Path(path).write_text(text)
    return text


def json_text(obj: Any, path: str | Path | None = None, **dumps: Any) -> str:
    """JSON text through the one encoder (:func:`steerformer.results.json_text`: NaN → null, numpy,
    complex, paths); ``dumps`` options are accepted for compatibility and ignored."""
    from .results import json_text as _json_text

    return _json_text(obj, path)


def csv_text(header: Sequence[Any], rows: Iterable[Sequence[Any]], path: str | Path | None = None) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return emit(buf.getvalue(), path)
