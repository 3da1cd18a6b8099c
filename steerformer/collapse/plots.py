"""The paper's collapse figure (Figs. 7–10): E against the number of blocks run on a log scale, the
mean over prompts with a band between quantiles; several runs on one axes."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.figure import Figure

from ..errors import bad_argument

# E is ≥ 0 up to rounding; a log axis needs a floor for exact zeros.
_FLOOR = 1e-16


def collapse_figure(runs: Sequence, *, labels: Sequence[str] | None = None, stat: str = "e",
                    band: tuple[str, str] = ("q05", "q95")) -> Figure:
    """One axes, one line + band per :class:`~steerformer.collapse.CollapseResult`."""
    fig = Figure(figsize=(8, 4.5), constrained_layout=True)
    ax = fig.add_subplot()
    for i, run in enumerate(runs):
        s = run.quantiles(stat)
        x = np.arange(len(s["mean"]))
        label = labels[i] if labels is not None else run.label()
        line, = ax.plot(x, np.maximum(s["mean"], _FLOOR), lw=1.2, label=f"{label}: mean")
        ax.fill_between(x, np.maximum(s[band[0]], _FLOOR), np.maximum(s[band[1]], _FLOOR),
                        color=line.get_color(), alpha=0.2, lw=0, label=f"{label}: {band[0]}–{band[1]} band")
        if len(runs) == 1 and run.n_passes <= 20:
            for p in range(1, run.n_passes):
                ax.axvline(p * run.n_blocks, color="0.8", lw=0.6, zorder=0, label="end of a pass" if p == 1 else None)
    if stat == "e":
        ax.set_yscale("log")
    names = {"e": "E (eq. 9)", "pairwise": "mean pairwise cosine", "centroid": "mean distance to centroid"}
    # a count of blocks run, not a layer id: block 0 of pass 1 gives x = 1
    ax.set_xlabel("blocks run (0 = embedded prompts)")
    ax.set_ylabel(f"{names.get(stat, stat)} over prompts")
    ax.set_title("Looped-model collapse")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


#: File name used when ``plot-collapse --out`` is an existing folder.
DEFAULT_FIGURE = "collapse_runs.png"


def figure_path(out) -> tuple[Path, str]:
    """(file to write, matplotlib format) for ``plot-collapse --out``: an existing folder gets
    :data:`DEFAULT_FIGURE` inside it; a name without suffix gets ``.png``; a suffix matplotlib
    cannot write is refused (before any run is read)."""
    p = Path(out).expanduser()
    if p.is_dir():
        p = p / DEFAULT_FIGURE
    elif p.suffix == "":
        p = p.with_name(p.name + ".png")
    fmt = p.suffix[1:].lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if fmt not in formats:
        raise bad_argument("--out", str(out), f"a figure file ending in one of {', '.join('.' + f for f in sorted(formats))}",
                           "Use e.g. collapse_runs.png or .pdf.")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise bad_argument("--out", str(out), f"a file in a folder that can be created ({exc.strerror or exc})") from None
    return p, fmt
