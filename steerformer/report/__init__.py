"""One self-contained HTML page per run (``report.html``): what a person looks at after `steer
--evaluate`, `evaluate` or `analyze` — answers plain and steered side by side with a strength
slider, the dose curve, the layer scan and the edit's facts; or the spectra, the statistics with
their null intervals and the verdict in words. Inline CSS, SVG and PNG, no network, no external
script (``html.CSP``).

The pages are rendered from what those commands saved (JSON and PNG files), never from a live
model, so ``steerformer report DIR`` renders any earlier output folder the same way:

    report_page(folder)   (kind, HTML text) of an output folder of steer, evaluate or analyze
    write_report(folder)  writes it to folder/report.html (a page steerformer wrote is replaced,
                          any other file of that name never)
    add_page(folder)      the same into a folder being written (inside ``outputs.write_atomically``)
"""

from __future__ import annotations

from .html import PAGE_NAME
from .write import add_page, report_page, write_report

__all__ = ["PAGE_NAME", "add_page", "report_page", "write_report"]
