"""Line charts as inline SVG (no matplotlib, no script): the dose curve and the layer scan of a
steering page are drawn from the numbers themselves, so the page stays text and small."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from .html import esc

#: A colour per series, in order (colour-blind safe: Okabe–Ito).
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")


@dataclasses.dataclass
class Series:
    """One line: its label, points (x, y; None or NaN y skipped) and look."""

    label: str
    x: Sequence[float]
    y: Sequence[float | None]
    color: str | None = None
    dashed: bool = False


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
               y_range: tuple[float, float] | None = None, band: tuple[float, float] | None = None,
               band_label: str = "", marker: float | None = None, marker_label: str = "",
               hline: float | None = None, hline_label: str = "", width: int = 540, height: int = 300) -> str:
    """An ``<svg>`` line chart of ``series``: axes with ticks, a legend, and optionally a shaded
    x-``band``, a vertical ``marker`` and a horizontal dotted ``hline``, each labelled."""
    pts = [(x, y) for s in series for x, y in zip(s.x, s.y) if _finite(x) and _finite(y)]
    xs = [p[0] for p in pts] + ([marker] if _finite(marker) else []) + ([*band] if band else [])
    ys = [p[1] for p in pts] + ([hline] if _finite(hline) else [])
    if not pts:
        return f"<p>{esc(title)}: no finite points to draw.</p>"
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range if y_range is not None else (min(0.0, min(ys)), max(ys) * 1.08 if max(ys) > 0 else 1.0)
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    if y1 == y0:
        y1 = y0 + 1
    n_legend = len(series) + sum(bool(lbl) and _finite(v) for lbl, v in
                                 ((band_label, band[0] if band else None), (marker_label, marker), (hline_label, hline)))
    cols = max(1, (width - 52) // 175)  # legend columns: a label of ~28 characters each
    left, right, top, bottom = 52, 14, 26, 40 + 16 * ((n_legend + cols - 1) // cols)
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + (1 - (min(max(y, y0), y1) - y0) / (y1 - y0)) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
           f'<text x="{left}" y="16" style="font-weight:600">{esc(title)}</text>']
    if band is not None:
        b0, b1 = max(band[0], x0), min(band[1], x1)
        out.append(f'<rect x="{px(b0):.1f}" y="{top}" width="{max(px(b1) - px(b0), 0):.1f}" height="{ph}" '
                   f'fill="#2ca02c" opacity="0.10"><title>{esc(band_label)}</title></rect>')
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#e6e8ec"/>'
                   f'<text x="{left - 5}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in _ticks(x0, x1, 6):
        out.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top + ph}" y2="{top + ph + 4}" stroke="#888"/>'
                   f'<text x="{px(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{t:g}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph + 31}" text-anchor="middle">{esc(x_label)}</text>')
    out.append(f'<text transform="translate(13,{top + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
               f'{esc(y_label)}</text>')
    if _finite(hline):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(hline):.1f}" y2="{py(hline):.1f}" stroke="#c00" '
                   f'stroke-dasharray="2 3"><title>{esc(hline_label)}</title></line>')
    if _finite(marker):
        out.append(f'<line x1="{px(marker):.1f}" x2="{px(marker):.1f}" y1="{top}" y2="{top + ph}" stroke="#333" '
                   f'stroke-dasharray="5 3"><title>{esc(marker_label)}</title></line>')
    legend = []
    for i, s in enumerate(series):
        color = s.color or COLORS[i % len(COLORS)]
        seg = [(px(x), py(y)) for x, y in zip(s.x, s.y) if _finite(x) and _finite(y)]
        dash = ' stroke-dasharray="6 3"' if s.dashed else ""
        if len(seg) > 1:
            d = " ".join(f"{a:.1f},{b:.1f}" for a, b in seg)
            out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{color}"><title>{esc(s.label)}</title></circle>'
                for a, b in seg]
        legend.append((s.label, color, s.dashed, "line"))
    if band is not None and band_label:
        legend.append((band_label, "#2ca02c", False, "band"))
    if _finite(marker) and marker_label:
        legend.append((marker_label, "#333", True, "line"))
    if _finite(hline) and hline_label:
        legend.append((hline_label, "#c00", True, "line"))
    col_w = (width - left) / cols
    for i, (label, color, dashed, kind) in enumerate(legend):
        lx, ly = left + (i % cols) * col_w, top + ph + 50 + 16 * (i // cols)
        if kind == "band":
            out.append(f'<rect x="{lx:.1f}" y="{ly - 8}" width="18" height="10" fill="#2ca02c" opacity="0.25"/>')
        else:
            dash = ' stroke-dasharray="4 2"' if dashed else ""
            out.append(f'<line x1="{lx:.1f}" x2="{lx + 18:.1f}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" '
                       f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 23:.1f}" y="{ly}">{esc(label)}</text>')
    out.append("</svg>")
    return "".join(out)
