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


def eigenvalue_planes(eigenvalues: np.ndarray, layer_ids: Sequence[int], title: str = "") -> Figure:
    """Eigenvalues in the complex plane, one panel per layer, λ1 highlighted."""
    L = len(layer_ids)
    cols = min(6, L)
    rows = math.ceil(L / cols)
    fig = Figure(figsize=(2.6 * cols, 2.5 * rows))
    for i, k in enumerate(layer_ids):
        ax = fig.add_subplot(rows, cols, i + 1)
        ev = eigenvalues[i]
        ax.scatter(ev.real, ev.imag, s=4, alpha=0.6, color="tab:blue", label="eigenvalues λ")
        ax.scatter([ev[0].real], [ev[0].imag], s=30, color="tab:red", marker="*", label="λ1")
        ax.axhline(0, color="0.8", lw=0.5)
        ax.axvline(0, color="0.8", lw=0.5)
        ax.set_title(f"layer {k}", fontsize=9)
        ax.set_xlabel("Re λ", fontsize=8)
        ax.set_ylabel("Im λ", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:  # one legend: the panels differ only in their data
            ax.legend(fontsize=6, loc="best")
    fig.suptitle(f"{title} eigenvalues of F = W_O·V (red: λ1, largest real part)".strip(), fontsize=10)
    fig.tight_layout()
    return fig


def top_real_parts(eigenvalues: np.ndarray, layer_ids: Sequence[int], top: int = 5, title: str = "") -> Figure:
    """Re λ1..Re λ_top across layers (paper Fig. 6(b)-like)."""
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot(1, 1, 1)
    x = np.asarray(layer_ids)
    for j in range(min(top, eigenvalues.shape[1])):
        ax.plot(x, eigenvalues[:, j].real, marker="o", ms=3, label=f"Re λ{j + 1}")
    ax.set_xlabel("layer (from 0)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("real part")
    ax.set_title(f"{title} top {top} eigenvalues by real part".strip())
    ax.legend(fontsize=8)
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
