"""Figures of spectra (paper Fig. 6 style). Object-oriented matplotlib only: no pyplot state, so
the library works under any backend and in threads.

Layers are numbered as in the terminal table and the CSV: the ids of the model's layers, from 0.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from .results import save_figure  # noqa: F401  (the one figure saver, re-exported)


def panel_grid(n: int) -> tuple[int, int]:
    """(rows, cols) of a near-square grid of ``n`` panels, a little wider than tall: 6 layers are
    2 × 3, 12 are 3 × 4, 80 are 8 × 10 (never a one-row strip of tiny panels)."""
    cols = max(1, min(n, math.ceil(math.sqrt(n * 1.25))))
    return math.ceil(n / cols), cols


def eigenvalue_planes(eigenvalues: np.ndarray, layer_ids: Sequence[int], title: str = "") -> Figure:
    """Eigenvalues in the complex plane, one panel per layer in a near-square grid, λ1 highlighted."""
    L = len(layer_ids)
    rows, cols = panel_grid(L)
    size = 2.8 if cols <= 4 else max(1.7, 17.0 / cols)  # many layers: smaller panels, a figure that fits
    fig = Figure(figsize=(size * cols, size * rows * 0.95 + 0.6))
    small = cols > 6  # many panels: smaller type
    for i, k in enumerate(layer_ids):
        ax = fig.add_subplot(rows, cols, i + 1)
        ev = eigenvalues[i]
        ax.scatter(ev.real, ev.imag, s=3 if small else 5, alpha=0.6, color="tab:blue", label="eigenvalues λ")
        ax.scatter([ev[0].real], [ev[0].imag], s=30, color="tab:red", marker="*", label="λ1")
        ax.axhline(0, color="0.8", lw=0.5)
        ax.axvline(0, color="0.8", lw=0.5)
        ax.set_title(f"layer {k}", fontsize=7 if small else 9, pad=2)
        ax.set_xlabel("Re λ", fontsize=6 if small else 8, labelpad=1)
        ax.set_ylabel("Im λ", fontsize=6 if small else 8, labelpad=1)
        ax.tick_params(labelsize=5 if small else 7)
        if i == 0:  # one legend: the panels differ only in their data
            ax.legend(fontsize=6, loc="best")
    fig.suptitle(f"{title} eigenvalues of F = W_O·V (red: λ1, largest real part)".strip(), fontsize=10)
    fig.tight_layout()
    return fig


#: top_real_parts: a marker, size and line style per rank, so a line that coincides with another
#: (a complex-conjugate pair shares its real part) stays visible: smaller markers sit inside larger
#: ones, and dashes let the line below show through.
RANK_STYLES = (("o", 9, "-"), ("s", 7, "--"), ("^", 5.5, "-."), ("D", 4, ":"), ("x", 3, (0, (1, 3))))


def top_real_parts(eigenvalues: np.ndarray, layer_ids: Sequence[int], top: int = 5, title: str = "") -> Figure:
    """Re λ1..Re λ_top across layers (paper Fig. 6(b)-like); coinciding lines stay visible
    (:data:`RANK_STYLES`)."""
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot(1, 1, 1)
    x = np.asarray(layer_ids)
    for j in range(min(top, eigenvalues.shape[1])):
        marker, size, ls = RANK_STYLES[j % len(RANK_STYLES)]
        ax.plot(x, eigenvalues[:, j].real, marker=marker, ms=size, ls=ls, lw=1.2, mfc="none",
                mew=1.2, label=f"Re λ{j + 1}")
    ax.set_xlabel("layer (from 0)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("real part")
    ax.set_title(f"{title} top {top} eigenvalues by real part".strip())
    ax.legend(fontsize=8, loc="best", title="a conjugate pair shares one real part", title_fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def real_part_histogram(eigenvalues: np.ndarray, layer_ids: Sequence[int], title: str = "") -> Figure:
    """Histogram of Re λ over all eigenvalues, one outline per layer."""
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot(1, 1, 1)
    re = eigenvalues.real
    bins = np.linspace(re.min(), re.max(), 60)
    cmap = __import__("matplotlib").colormaps["viridis"]
    for i, k in enumerate(layer_ids):
        ax.hist(re[i], bins=bins, histtype="step", color=cmap(i / max(1, len(layer_ids) - 1)), label=f"layer {k}")
    ax.set_xlabel("Re λ")
    ax.set_ylabel("count")
    ax.set_title(f"{title} distribution of Re λ per layer".strip())
    if len(layer_ids) <= 12:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
