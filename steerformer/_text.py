"""CSV text: returned, and also written when a path is given (JSON text is ``results.json_text``)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Iterable, Sequence


def csv_text(header: Sequence[Any], rows: Iterable[Sequence[Any]], path: str | Path | None = None) -> str:
    """``header`` then ``rows`` as CSV text; also written to ``path`` when one is given."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    if path is not None:
        Path(path).write_text(buf.getvalue())
    return buf.getvalue()
