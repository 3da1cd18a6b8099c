"""Figures of the power-method statistics, in the layout of the paper's Figs. 2, 6, 7, 8, 10, 11.
Object-oriented matplotlib only (no pyplot state)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from ..results import save_figure  # noqa: F401  (the one figure saver, re-exported)


def _col(stats, key: str) -> np.ndarray:
    return np.array([np.nan if r.get(key) is None else r[key] for r in stats.layers], dtype=float)


def _x(stats) -> tuple[np.ndarray, str]:
    """The x of every per-layer figure and its axis label: the model's layer ids (from 0, as in the
    terminal table, report.json and the CSV) for one pass through the layers; the step number for a
    prolonged run, whose steps revisit the same layers."""
    layers = _col(stats, "layer") if stats.layers and "layer" in stats.layers[0] else None
    if layers is not None and len(np.unique(layers)) == len(layers):
        return layers, "layer k"
    return _col(stats, "step"), "step k (layer applications)"


def _band(ax, x, mean, std, color, label, ls="-"):
    ax.plot(x, mean, ls, color=color, marker="o", ms=3, label=label)
    if std is not None:
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15, lw=0, label=f"{label}: ± std over tokens")


def _stat(ax, st, key: str, std_key: str | None, color: str, label: str) -> None:
    """The mean of ``key`` per step with its band: the confidence interval over prompts when the
    statistics carry one (``<key>_lo``/``_hi``), else ± the std over tokens — the legend says which."""
    x = _x(st)[0]
    level = st.meta.get("ci", {}).get("level")
    if level and st.layers and f"{key}_lo" in st.layers[0]:
        ax.plot(x, _col(st, key), "-", color=color, marker="o", ms=3, label=label)
        ax.fill_between(x, _col(st, f"{key}_lo"), _col(st, f"{key}_hi"), color=color, alpha=0.2, lw=0,
                        label=f"{label}: {level:.0%} CI over prompts")
    elif std_key is not None:
        _band(ax, x, _col(st, key), _col(st, std_key), color, label)
    else:
        ax.plot(x, _col(st, key), "-o", ms=3, color=color, label=label)


def _null(ax, st, tag: str) -> None:
    """The null's central interval (gray) and the layers beyond chance (stars)."""
    if not st.layers or f"null_{tag}_lo" not in st.layers[0]:
        return
    x = _x(st)[0]
    test = st.meta.get("test", {})
    level = st.meta.get("ci", {}).get("level") or 0.95
    ax.fill_between(x, _col(st, f"null_{tag}_lo"), _col(st, f"null_{tag}_hi"), color="0.5", alpha=0.25, lw=0,
                    label=f"null: central {level:.0%} of {test.get('draws', '?')} random-weight draws")
    hit = np.array([bool(r.get("beyond_chance")) for r in st.layers])
    if hit.any():
        y = _col(st, "delta_rho_mean" if tag == "delta" else "P")
        name = {"bh": "BH", "holm": "Holm"}.get(test.get("correction"), "")
        # the verdict's whole rule (stats.null.annotate): a power-method step whose Δρ AND P both have
        # an adjusted p below α — an adjusted p < α alone is no star
        ax.plot(x[hit], y[hit], "*", ms=10, color="black", lw=0,
                label=f"beyond chance: a power-method step\nwith {name}-adjusted p < {test.get('alpha', 0.05):g} "
                      "for Δρ and P")


def power_method_rows(stats_list: Sequence, labels: Sequence[str], title: str = "") -> Figure:
    """Three rows (ρ vs ρ̄, Δρ vs Δρ̄, P vs P̄; bands: confidence intervals over prompts, or std over
    tokens without them; the null's central interval and the layers beyond chance when tested), one
    column per statistics set — e.g. the controlled dynamics next to the full model (Figs. 2(b), 7,
    10, 11)."""
    ncol = len(stats_list)
    fig = Figure(figsize=(4.6 * ncol, 9))
    axes = fig.subplots(3, ncol, squeeze=False, sharex="col")
    for c, (st, lab) in enumerate(zip(stats_list, labels)):
        x, xlabel = _x(st)
        ax = axes[0, c]
        _stat(ax, st, "rho_mean", "rho_std", "tab:red", "ρ_k (v1)")
        _stat(ax, st, "baseline_rho_mean", "baseline_rho_std", "tab:blue", "ρ̄_k (all, pairs 2-D)")
        ax.plot(x, _col(st, "baseline1d_rho_mean"), "--", color="tab:cyan", lw=1, label="ρ̄_k (real only)")
        ax.set_title(lab, fontsize=10)
        ax = axes[1, c]
        _stat(ax, st, "delta_rho_mean", "delta_rho_std", "tab:red", "Δρ_k")
        _stat(ax, st, "baseline_delta_mean", "baseline_delta_std", "tab:blue", "Δρ̄_k")
        _null(ax, st, "delta")
        ax.plot(x, _col(st, "baseline1d_delta_mean"), "--", color="tab:cyan", lw=1, label="Δρ̄_k (real only)")
        ax.axhline(0, color="0.6", lw=0.6)
        ax = axes[2, c]
        _stat(ax, st, "P", None, "tab:red", "P_k")
        _stat(ax, st, "baseline_P", None, "tab:blue", "P̄_k")
        _null(ax, st, "P")
        ax.plot(x, _col(st, "baseline1d_P"), "--", color="tab:cyan", lw=1, label="P̄_k (real only)")
        ax.axhline(0.5, color="0.6", lw=0.6)
        ax.set_ylim(-0.02, 1.02)
        for ax in axes[:, c]:
            ax.set_xlabel(xlabel, fontsize=8)
    for r, name in enumerate(("correlation", "increment", "probability of increment")):
        for ax in axes[r]:
            ax.set_ylabel(name)
    for ax in axes.flat:
        # every column: each has its own bands (intervals; the null only where it was tested)
        ax.legend(fontsize=6, loc="best")
        ax.grid(alpha=0.3)
    fig.suptitle(title or "power-method statistics per layer", fontsize=11)
    fig.tight_layout()
    return fig


def cumulative(stats, title: str = "") -> Figure:
    """Fig. 8: ρ(x(k+1), w_k) for the principal eigenvector w_k of F_k⋯F_first (layer ids from 0), next to ρ_k."""
    fig = Figure(figsize=(6, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    x, xlabel = _x(stats)
    first = int(x[0]) if len(x) else 0
    _stat(ax, stats, "cumulative_rho_mean", "cumulative_rho_std", "tab:green", f"ρ(x(k+1), w_k), w_k of F_k⋯F_{first}")
    _band(ax, x, _col(stats, "rho_mean"), None, "tab:red", "ρ_k (v1 of F_k)", ls="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("correlation")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title or "cumulative product", fontsize=10)
    fig.tight_layout()
    return fig


def last_layer_histograms(stats, title: str = "") -> Figure:
    """Fig. 2(a)(b): histograms over tokens of ρ(x(L), v1) (Re v1 when λ1 is complex) and ρ_S(x(L))."""
    fig = Figure(figsize=(8, 3.2))
    axes = fig.subplots(1, 2)
    last = stats.layers[-1] if stats.layers else {"subspace": "v1v2"}
    names = {"rho_v1": "ρ(x(L), v1)" if not last.get("lambda1_complex") else "ρ(x(L), Re v1)",
             "rho_S": "ρ_S(x(L)), S = " + ("span{Re v1, Im v1}" if last.get("subspace") == "pair" else "span{v1, v2}")}
    for ax, (key, label) in zip(axes, names.items()):
        h = stats.histograms.get(key)
        if h:
            e = np.asarray(h["edges"])
            ax.bar(e[:-1], h["counts"], width=np.diff(e), align="edge", color="tab:blue", alpha=0.7,
                   label=f"{int(np.sum(h['counts']))} tokens after the last layer")
            ax.legend(fontsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel("tokens")
    fig.suptitle(title or "last layer", fontsize=10)
    fig.tight_layout()
    return fig


def token_trajectories(stats, title: str = "", max_lines: int = 200) -> Figure:
    """Fig. 6(a)(b)(c): intertoken distance (mean, max) and per-token ρ(x, v1), ρ(x, Re v1), ρ_S
    per step — gray lines one token each, red the mean. For a prolonged run, this is Fig. 6(c)."""
    fig = Figure(figsize=(6.5, 9))
    axes = fig.subplots(4, 1, sharex=True)
    x = np.arange(len(stats.layers) + 1)
    d0 = stats.meta["distance_initial"]
    ax = axes[0]
    ax.plot(x, np.r_[d0["mean"], _col(stats, "distance_mean")], color="tab:red", label="mean")
    ax.plot(x, np.r_[d0["max"], _col(stats, "distance_max")], color="tab:gray", ls="--", label="max")
    ax.set_ylabel("intertoken distance")
    ax.legend(fontsize=8)
    for ax, key, label in zip(axes[1:], ("rho", "rho_re_v1", "rho_S"), ("ρ(x, v1) (complex λ1: 2-D)", "ρ(x, Re v1)", "ρ_S(x)")):
        t = stats.per_token.get(key)
        if t is None or t.size == 0:
            continue
        if key == "rho":  # the only one also known before the first step
            t = np.vstack([stats.per_token["rho_before"][0], t])
        xs = x if key == "rho" else x[1:]
        idx = np.linspace(0, t.shape[1] - 1, min(max_lines, t.shape[1])).astype(int)
        ax.plot(xs, t[:, idx], color="0.7", lw=0.4)
        ax.plot(xs, t.mean(axis=1), color="tab:red", lw=1.8)
        ax.set_ylabel(label)
        ax.set_ylim(-0.02, 1.02)
    for ax in axes:
        ax.set_xlabel("step (layer applications; 0 = initial tokens)", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title or "token trajectories", fontsize=10)
    fig.tight_layout()
    return fig
