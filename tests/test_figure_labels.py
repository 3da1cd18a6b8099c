"""Every figure of the spectra, the ODE setups, the collapse and the sweep has axis labels on
every axes, a legend, every shaded band named in its legend, and numbers layers as the terminal
table does (the model's layer ids, from 0)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from matplotlib.collections import PolyCollection
from transformers import GPT2Config, GPT2LMHeadModel


def _tiny_gpt2(n_layer: int = 3) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=n_layer, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
    return GPT2LMHeadModel(cfg).eval()


def assert_labelled(fig) -> None:
    """x/y (and z) labels on every axes; a legend somewhere; every band in its axes' legend."""
    assert fig.axes
    legends = 0
    for ax in fig.axes:
        where = f"axes {ax.get_title()!r}"
        assert ax.get_xlabel() and ax.get_ylabel(), where
        if hasattr(ax, "get_zlabel"):
            assert ax.get_zlabel(), where
        shown = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
        legends += bool(shown)
        for band in (c for c in ax.collections if isinstance(c, PolyCollection)):
            assert band.get_label() in shown, (where, band.get_label(), shown)
    assert legends, "no legend on the figure"


@pytest.fixture
def captured(monkeypatch):
    """The figures the ODE plots and the sweep hand to the figure saver, instead of files."""
    import steerformer.ode.plots as ode_plots
    import steerformer.plotting as plotting

    figs = []

    def keep(fig, path, **_):
        figs.append((path.name, fig))
        return path

    monkeypatch.setattr(ode_plots, "save_figure", keep)
    monkeypatch.setattr(plotting, "save_figure", keep)
    return figs


def test_spectral_figures_number_layers_as_the_table(captured, tmp_path) -> None:
    from steerformer.analyze import analyze

    rep = analyze(_tiny_gpt2(), layers=[1, 2], stats=False)
    table_ids = [int(line.split()[0]) for line in rep.table().splitlines()[1:]]
    assert table_ids == [1, 2]
    rep.plot(tmp_path)
    figs = dict(captured)
    planes = figs["eigenvalues_complex_plane.png"]
    assert [ax.get_title() for ax in planes.axes] == [f"layer {k}" for k in table_ids]
    assert [ax.get_xlabel() for ax in planes.axes] == ["Re λ"] * 2
    # λ1 of each panel is the table's λ1 (largest real part)
    for ax, row in zip(planes.axes, rep.layers):
        star = ax.collections[1].get_offsets()[0]
        assert star[0] == pytest.approx(row["lambda1"][0])
    top = figs["top5_real_parts.png"].axes[0]
    assert list(top.lines[0].get_xdata()) == table_ids
    hist = figs["real_part_histogram.png"].axes[0]
    assert [t.get_text() for t in hist.get_legend().get_texts()] == [f"layer {k}" for k in table_ids]
    for fig in figs.values():
        assert_labelled(fig)


@pytest.mark.parametrize("name, options", [
    ("5.1.1", {"t1": 0.5, "save_points": 11}),
    ("5.1.2", {"runs": 2, "t1": 0.2, "save_points": 5, "n": 4, "d": 6}),
    ("5.1.3", {"t1": 0.5, "save_points": 11}),
    ("fig13a", {"t1": 5}),
    ("fig13b", {"t1": 5}),
    ("bridge", {"runs": 2, "t1": 3}),
])
def test_ode_figures_have_labels_and_legends(captured, tmp_path, name, options) -> None:
    from steerformer.ode import run_setup

    paths = run_setup(name, **options).plot(tmp_path)
    assert [p.name for p in paths] == [n for n, _ in captured]
    for _, fig in captured:
        assert_labelled(fig)
    if name in ("fig13a", "fig13b"):
        spheres = [ax for _, fig in captured for ax in fig.axes if hasattr(ax, "get_zlabel")]
        assert len(spheres) == 2
        for ax in spheres:
            assert [t.get_text() for t in ax.get_legend().get_texts()] == ["token paths", "start", "end"]


def test_collapse_figure_names_each_band(tmp_path) -> None:
    from steerformer.collapse import collapse, collapse_figure

    model = _tiny_gpt2(2)
    a = collapse(model, passes=2, n_prompts=3, length=6)
    b = collapse(model, passes=2, n_prompts=3, length=6, ffn=False)
    fig = collapse_figure([a, b], labels=["full", "no FFN"])
    assert_labelled(fig)
    shown = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert shown == ["full: mean", "full: q05–q95 band", "no FFN: mean", "no FFN: q05–q95 band"]
    one = collapse_figure([a]).axes[0]
    assert "end of a pass" in [t.get_text() for t in one.get_legend().get_texts()]
    # x counts blocks run: the mean line has one point per block plus the embedded prompts
    assert len(one.lines[0].get_xdata()) == 1 + 2 * 2


def test_sweep_figure_labels_and_layer_ids(captured, tmp_path) -> None:
    from steerformer.sweep import checkpoints_from, sweep

    _tiny_gpt2().save_pretrained(tmp_path / "ckpt")
    sweep(checkpoints_from(models=str(tmp_path / "ckpt")), tmp_path / "out", layers=[0, 2])
    (name, fig), = captured
    assert name == "sweep.png"
    assert_labelled(fig)
    with open(tmp_path / "out" / "sweep.csv") as f:
        csv_layers = [int(r["layer"]) for r in csv.DictReader(f)]
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [f"layer {k}" for k in csv_layers]
    assert csv_layers == [0, 2]
    assert np.isfinite(fig.axes[0].lines[0].get_ydata()).all()


def test_statistics_figures_number_layers_from_zero_and_name_every_band(tmp_path, monkeypatch) -> None:
    """power_method.png and cumulative.png put each layer at its model id (as report.json and the
    table), and every shaded band — interval over prompts, std over tokens, the null's interval —
    has its own legend entry."""
    import steerformer.stats.plots as stats_plots
    from steerformer.stats import power_method_stats

    figs = {}

    def keep(fig, path, **_):
        figs[path.name] = fig
        return path

    monkeypatch.setattr(stats_plots, "save_figure", keep)
    rep = power_method_stats(_tiny_gpt2(), layers=[1, 2], n_prompts=6, n_tokens=4, null_draws=4, bootstrap=200,
                             full_model=False)
    assert [r["layer"] for r in rep.controlled.layers] == [1, 2]
    rep.plot(tmp_path)
    assert {"power_method.png", "cumulative.png", "histograms_last_layer.png"} <= set(figs)
    for fig in figs.values():
        assert_labelled(fig)
    for name in ("power_method.png", "cumulative.png"):
        for ax in figs[name].axes:
            assert ax.get_xlabel() == "layer k"
            data = [line for line in ax.lines if not line.get_label().startswith("_")]  # not the reference lines
            assert data and all(list(line.get_xdata()) == [1, 2] for line in data), name
    shown = {t.get_text() for ax in figs["power_method.png"].axes for t in ax.get_legend().get_texts()}
    assert any(s.startswith("null: central 95% of 4") for s in shown)
    assert "Δρ_k: 95% CI over prompts" in shown
    # without intervals the bands are ± std over tokens, named as such
    figs.clear()
    power_method_stats(_tiny_gpt2(), n_prompts=6, n_tokens=4, null_draws=0, ci=0, full_model=False).plot(tmp_path)
    ax = figs["power_method.png"].axes[0]
    assert "ρ_k (v1): ± std over tokens" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert list(ax.lines[0].get_xdata()) == [0, 1, 2] and ax.get_xlabel() == "layer k"
    for fig in figs.values():
        assert_labelled(fig)
