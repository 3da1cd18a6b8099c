"""The page every report is written into: one self-contained HTML file (inline CSS, SVG, PNG as
``data:`` URIs and a few lines of inline script), readable offline in any browser.

Nothing on the page is fetched: its Content-Security-Policy (:data:`CSP`) allows no source but the
page itself and ``data:`` images, so even a URL that slipped into an answer's text stays text.
The generator tag (``outputs.REPORT_MARK``) marks a page steerformer wrote: ``report`` replaces only
such a page (``outputs.REPORT_PAGE``).
"""

from __future__ import annotations

import base64
import html
import math
import re
from pathlib import Path
from typing import Iterable, Sequence

from ..files import read_regular
from ..outputs import REPORT_MARK

#: The file name of the page in an output folder.
PAGE_NAME = "report.html"
#: No network: nothing but the page itself and inline images (``data:``).
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:18px 22px 60px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d8dce3;padding-bottom:4px}
.sub{color:#5b6475;margin:0 0 12px}
section{background:#fff;border:1px solid #e2e5ea;border-radius:8px;padding:12px 16px;margin:14px 0}
table{border-collapse:collapse;font-size:13.5px}td,th{padding:3px 9px;border-bottom:1px solid #eceef2;text-align:right}
th{background:#f1f3f6;font-weight:600}td.l,th.l{text-align:left}
.facts td{text-align:left}.facts td:first-child{color:#5b6475;white-space:nowrap}
mark{background:#ffe27a;padding:0 1px;border-radius:2px}
.qa{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin:10px 0 16px}
.q{grid-column:1/3;font-weight:600;margin-top:6px}
.ans{background:#f8f9fb;border:1px solid #e4e7ec;border-radius:6px;padding:8px 10px;white-space:pre-wrap}
.ans.steered{background:#f3f8ff;border-color:#cfe0f7}
.who{font-size:12px;color:#5b6475;margin-bottom:3px}
.r{display:inline-block;font-size:12px;border-radius:10px;padding:0 7px;margin-right:4px;background:#eceff3}
.r2{background:#cdeccf}.r1{background:#f6edc4}.r0{background:#f6d0d0}
.slider{position:sticky;top:0;z-index:2;background:#fff;border-bottom:1px solid #d8dce3;padding:8px 0 6px}
.slider input{width:100%}
.ticks{display:flex;justify-content:space-between;font-size:12px;color:#5b6475}
.now{font-size:14px;margin-top:4px}.now b{font-size:15px}
.warn{color:#9a3b00}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;background:#f1f3f6;border-radius:4px}
pre{padding:8px 10px;overflow-x:auto}code{padding:0 3px}
img.fig{max-width:calc(50% - 14px);vertical-align:top;border:1px solid #eceef2;border-radius:4px;margin:4px}
svg text{font:11px system-ui,sans-serif;fill:#333}
.verdict{font-size:16px;font-weight:600}
td small{white-space:nowrap}
"""


def esc(text: object) -> str:
    """``text`` as HTML text (quotes too)."""
    return html.escape(str(text), quote=True)


def number(x: object, digits: int = 3) -> str:
    """A number for a table cell: ``digits`` significant digits; "–" for None or NaN."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return esc(x)
    if isinstance(x, int):  # counts and layer ids as they are (1000, not 1e+03)
        return str(x)
    return esc(f"{x:.{digits}g}")


def highlight(text: str, words: Sequence[str]) -> str:
    """``text`` escaped, each of ``words`` as a whole word (any case) in ``<mark>`` — the same rule
    as the concept rate's (``steering.evaluation.judge.mentions``)."""
    words = [w for w in words if w]
    if not words:
        return esc(text)
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.IGNORECASE)
    out, at = [], 0
    for m in pattern.finditer(text):
        out += [esc(text[at:m.start()]), f"<mark>{esc(m.group(0))}</mark>"]
        at = m.end()
    return "".join(out + [esc(text[at:])])


def table(header: Sequence[str] | None, rows: Iterable[Sequence[object]], *, left: int = 1, cls: str = "") -> str:
    """An HTML table (``header`` None: no header row); the first ``left`` columns left-aligned; cells
    are escaped unless already markup (pass :class:`Markup`)."""
    def cell(tag: str, i: int, v: object) -> str:
        body = v if isinstance(v, Markup) else (number(v) if isinstance(v, (int, float)) or v is None else esc(v))
        return f"<{tag}{' class=l' if i < left else ''}>{body}</{tag}>"

    head = "" if header is None else "<tr>" + "".join(cell("th", i, h) for i, h in enumerate(header)) + "</tr>"
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table{f' class={cls}' if cls else ''}>{head}{body}</table>"


class Markup(str):
    """A string that is already HTML (not escaped again by :func:`table`)."""


def png_image(path: str | Path, alt: str) -> str:
    """An ``<img>`` holding the PNG file at ``path`` inline (base64); "" when there is no such file."""
    path = Path(path)
    if not path.is_file():
        return ""
    data = base64.b64encode(read_regular(path)).decode("ascii")
    return f'<img class=fig alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def page(title: str, body: str, *, script: str = "") -> str:
    """The whole document: head (charset, CSP, generator mark, style), ``body`` in ``<main>``, and
    ``script`` inline at the end."""
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"{REPORT_MARK}"
            '<meta name=viewport content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n<body><main>\n{body}\n</main>"
            + (f"<script>{script}</script>" if script else "") + "</body></html>\n")
