"""Figures of the named setups. Object-oriented matplotlib only (``Figure``, no pyplot): the library
never touches the global backend or figure registry, and every figure is saved, never shown."""

from __future__ import annotations

import pathlib

import numpy as np

from ..results import save_figure


def _figure(figsize: tuple[float, float]):
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def _save(fig, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    return save_figure(fig, path, tight=False)


def _one_entry(label: str, y: np.ndarray) -> list:
    """Labels for ``ax.plot(x, y)`` with y (T, m): one legend entry for the m lines."""
    return [label] + [None] * (y.shape[1] - 1)


def _sphere(ax, tokens: np.ndarray, title: str) -> None:
    """Trajectories (T, n, 3) on the unit sphere: blue paths, white start, grey end (as the papers)."""
    u, v = np.mgrid[0:2 * np.pi:40j, 0:np.pi:20j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", lw=0.3)
    for i in range(tokens.shape[1]):
        ax.plot(*tokens[:, i, :].T, color="tab:blue", lw=1, label="token paths" if i == 0 else None)
    ax.scatter(*tokens[0].T, facecolor="white", edgecolor="k", s=25, depthshade=False, label="start")
    ax.scatter(*tokens[-1].T, color="0.5", edgecolor="k", s=35, depthshade=False, label="end")
    ax.set(xlabel="x₁", ylabel="x₂", zlabel="x₃", title=title)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_box_aspect((1, 1, 1))


def _fig_3d(tokens: np.ndarray, title: str, path: pathlib.Path) -> pathlib.Path:
    fig = _figure((5, 5))
    _sphere(fig.add_subplot(projection="3d"), tokens, title)
    return _save(fig, path)


def _lines(x, ys: dict[str, np.ndarray], xlabel: str, ylabel: str, title: str, path, log=False):
    """One line per 1-D series; a 2-D series (T, runs) draws one thin line per run under one
    legend entry."""
    fig = _figure((6, 4))
    ax = fig.add_subplot(1, 1, 1)
    for label, y in ys.items():
        y = np.asarray(y)
        if y.ndim == 1:
            ax.plot(x, y, label=label)
        else:
            y = y.reshape(len(x), -1)
            ax.plot(x, y, lw=0.7, alpha=0.7, label=_one_entry(f"{label} (one line per run)", y))
    ax.legend()
    if log:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


#: The x axis of the discrete maps: how many times the map (one layer) has been applied.
STEPS = "step k (applications of the map; 0 = start)"


def plot_5_1_1(r, out):
    paths = [_fig_3d(r.trajectory["tokens"][:, 0], "5.1.1: tokens on S² (run 0)", out / "tokens_sphere.png")]
    pn = np.asarray(r.extra["P_frobenius_norms"])
    paths.append(_lines(r.extra["P_norm_times"], {"‖P1(t)‖_F": pn[:, 0], "‖P2(t)‖_F": pn[:, 1]},
                        "t", "Frobenius norm", "5.1.1: ‖P_η(t)‖_F", out / "P_norms.png"))
    paths.append(_lines(r.times, {"V(t)": r.series["V"][:, 0]} if r.series["V"].shape[1] == 1 else {"V": r.series["V"]},
                        "t", "V = max_i (1 − vᵀy_i)", "5.1.1: Lyapunov function (7), v = (1,0,0)", out / "lyapunov_V.png"))
    return paths


def plot_5_1_2(r, out):
    return [
        _lines(r.times, {"E": r.series["E"]}, "t", "E", f"5.1.2: E (eq. 9) along {r.series['E'].shape[1]} runs",
               out / "E_runs.png"),
        _lines(r.times, {"E": np.maximum(r.series["E"], 1e-16)}, "t", "E", "5.1.2: E (log scale)",
               out / "E_runs_log.png", log=True),
    ]


def plot_5_1_3(r, out):
    return [
        _fig_3d(r.trajectory["tokens"][:, 0], "5.1.3: tokens on S² (run 0)", out / "tokens_sphere.png"),
        _lines(r.times, {"V1 = 1 − y1ᵀv": r.series["V1"][:, 0], "V2 = 1 − y2ᵀv": r.series["V2"][:, 0]},
               "t", "V", "5.1.3: V1 and V2", out / "V1_V2.png"),
    ]


def plot_fig13a(r, out):
    fig = _figure((10, 8))
    for row, key, label in ((0, "single", "single head (8)"), (1, "multi", f"{r.config['heads']} heads (3)")):
        _sphere(fig.add_subplot(2, 2, 2 * row + 1, projection="3d"), r.trajectory[f"tokens_{key}"][:, 0], label)
        ax = fig.add_subplot(2, 2, 2 * row + 2)
        rho = r.series[f"rho_{key}"][:, 0]  # (T, n)
        ax.plot(r.times, rho, lw=0.8, label=_one_entry("tokens (one line each)", rho))
        ax.plot(r.times, rho.mean(-1), "k:", lw=2, label="mean")
        ax.set(xlabel=STEPS, ylabel="ρ(x_i, v1)", title=label, ylim=(0, 1.02))
        ax.legend()
    return [_save(fig, out / "fig13a.png")]


def plot_fig13b(r, out):
    fig = _figure((10, 8))
    for row, key in ((0, "small"), (1, "large")):
        eps = r.config[key]
        _sphere(fig.add_subplot(2, 2, 2 * row + 1, projection="3d"), r.trajectory[f"tokens_{key}"][:, 0],
                f"perturbation {eps} ({key})")
        ax = fig.add_subplot(2, 2, 2 * row + 2)
        comp = r.series[f"v1_component_{key}"][:, 0]  # (T, n)
        ax.plot(r.times, comp, lw=0.8, label=_one_entry("tokens (one line each)", comp))
        ax.set(xlabel=STEPS, ylabel="v1ᵀx_i", title=f"{key}: tokens' v1 component", ylim=(-1.05, 1.05))
        ax.legend()
    return [_save(fig, out / "fig13b.png")]


def plot_bridge(r, out):
    return [
        _lines(r.times, {"mean E": r.series["E"].mean(1)}, STEPS, "E", "bridge: E (mean over runs)",
               out / "E.png"),
        _lines(r.times, {"mean ρ(x, v1)": r.series["rho_v1"].mean(1)}, STEPS, "ρ",
               "bridge: alignment with v1(F)", out / "alignment.png"),
    ]


#: The figures of each named setup, by name (``SetupResult.plot`` and ``SETUPS[name].draw``); a
#: result under another name (a layer-matrix run) gets the bridge figures.
FIGURES = {"5.1.1": plot_5_1_1, "5.1.2": plot_5_1_2, "5.1.3": plot_5_1_3, "fig13a": plot_fig13a,
           "fig13b": plot_fig13b, "bridge": plot_bridge}
