"""Which page an output folder gets, and writing it there under the output rules
(``outputs.REPORT_PAGE``: only a page steerformer wrote is ever replaced, through a temporary file)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import bad_argument
from ..outputs import REPORT_PAGE, write_output_file
from ..results import read_json
from .analysis import analysis_page
from .html import PAGE_NAME
from .steering import evaluation_page, record_page

#: (kind, the file that marks a folder of that kind); the first one present decides.
SOURCES = (("steer", "steerformer/record.json"), ("evaluate", "evaluation.json"), ("analyze", "report.json"))


def report_page(folder: str | os.PathLike, *, name: str = "folder", section: dict | None = None) -> tuple[str, str]:
    """(kind, the page's HTML) of the output folder ``folder`` of `steer`, `evaluate` or `analyze`;
    anything else is refused in one line naming ``name``. ``section``: the steering method's section
    of a steered folder (``report/steering.py``), from the caller."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise bad_argument(name, str(folder), "an existing output folder of steer, evaluate or analyze (not found)",
                           "Pass the --out folder of one of those commands.")
    for kind, marker in SOURCES:
        if (root / marker).is_file():
            doc = read_json(root / marker)
            if not isinstance(doc, dict):
                raise bad_argument(name, str(folder), f"a folder whose {marker} is a JSON object")
            if kind == "steer":
                records = doc.get("records") if "records" in doc else [doc]  # the chain; a lone record too
                if not isinstance(records, list) or not records or not isinstance(records[-1], dict):
                    raise bad_argument(name, str(folder), f"a folder whose {marker} holds a steering record")
                return kind, record_page(records[-1], earlier=len(records) - 1, section=section)
            if kind == "evaluate":
                return kind, evaluation_page(doc)
            return kind, analysis_page(root, doc)
    raise bad_argument(name, str(folder), "an output folder of steer, evaluate or analyze (it holds none of "
                       + ", ".join(m for _, m in SOURCES) + ")", "Pass the --out folder of one of those commands.")


def write_report(folder: str | os.PathLike, *, name: str = "folder", section: dict | None = None) -> Path:
    """Render ``folder``'s page (:func:`report_page`, with the steering method's ``section``) and write
    it to ``folder/report.html`` atomically; an existing ``report.html`` is replaced only when
    steerformer wrote it."""
    _, text = report_page(folder, name=name, section=section)
    return write_output_file(Path(folder).expanduser() / PAGE_NAME, lambda tmp: Path(tmp).write_text(text, "utf-8"),
                             REPORT_PAGE, overwrite=True, name=name)


def add_page(folder: str | os.PathLike) -> Path:
    """Write ``folder``'s page into it directly: for a folder being filled, the temporary folder of
    ``outputs.write_atomically``, which moves it into place whole (page included) or not at all."""
    path = Path(folder) / PAGE_NAME
    path.write_text(report_page(folder)[1], "utf-8")
    return path
