"""Figures a person can read: a near-square grid of eigenvalue panels (6 layers: 2 × 3, 80
layers: 8 × 10), top-5 lines that stay visible when they coincide, a beyond-chance legend that
states the whole rule, and models named by id or folder, never by a cache path."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("n, shape", [(1, (1, 1)), (6, (2, 3)), (12, (3, 4)), (30, (5, 7)), (80, (8, 10))])
def test_eigenvalue_planes_form_a_near_square_grid(n, shape) -> None:
    from steerformer.plotting import eigenvalue_planes, panel_grid

    assert panel_grid(n) == shape
    rows, cols = shape
    assert rows * cols >= n and (rows - 1) * cols < n  # no empty row
    if n in (6, 80):
        ev = np.linspace(1, 2, n * 4).reshape(n, 4).astype(complex)
        fig = eigenvalue_planes(ev, list(range(n)))
        corners = {(round(ax.get_position().x0, 3), round(ax.get_position().y0, 3)) for ax in fig.axes}
        assert len({y for _, y in corners}) == rows and len({x for x, _ in corners}) == cols
        w, h = fig.get_size_inches()
        assert 0.6 < w / h < 2.0 and w <= 20  # not a strip, not a poster


def test_top_real_parts_lines_that_coincide_stay_visible() -> None:
    from steerformer.plotting import top_real_parts

    ev = np.zeros((4, 6), complex)
    ev[:, :5] = [3, 2 + 0.5j, 2 - 0.5j, 1 + 0.2j, 1 - 0.2j]  # λ2/λ3 and λ4/λ5: one real part each
    lines = top_real_parts(ev, [0, 1, 2, 3]).axes[0].get_lines()
    assert len(lines) == 5
    styles = [(ln.get_marker(), ln.get_markersize(), str(ln.get_linestyle())) for ln in lines]
    assert len({m for m, _, _ in styles}) == 5  # a marker of its own per rank
    sizes = [s for _, s, _ in styles]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 5  # the smaller sits inside the larger
    for a, b in ((1, 2), (3, 4)):  # the pair on top of each other: the one drawn over is hollow
        assert lines[a].get_markerfacecolor() == "none"
        np.testing.assert_array_equal(lines[a].get_ydata(), lines[b].get_ydata())


def test_beyond_chance_legend_states_the_rule_the_stars_follow() -> None:
    from matplotlib.figure import Figure

    from steerformer.stats.plots import _null  # the helper that draws the stars and their legend

    class St:
        meta = {"test": {"draws": 100, "alpha": 0.05, "correction": "bh"}, "ci": {"level": 0.95}}
        # layer 1: both adjusted p < α but not a power-method step -> no star; layer 2: a star
        layers = [
            {"layer": 0, "delta_rho_mean": 0.1, "P": 0.6, "null_delta_lo": -1, "null_delta_hi": 1,
             "beyond_chance": False, "power_method_step": True, "p_delta_adjusted": 0.2, "p_P_adjusted": 0.01},
            {"layer": 1, "delta_rho_mean": -0.1, "P": 0.4, "null_delta_lo": -1, "null_delta_hi": 1,
             "beyond_chance": False, "power_method_step": False, "p_delta_adjusted": 0.01, "p_P_adjusted": 0.01},
            {"layer": 2, "delta_rho_mean": 0.3, "P": 0.8, "null_delta_lo": -1, "null_delta_hi": 1,
             "beyond_chance": True, "power_method_step": True, "p_delta_adjusted": 0.01, "p_P_adjusted": 0.01},
        ]

    ax = Figure().add_subplot()
    _null(ax, St(), "delta")
    stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == [2.0]
    label = stars[0].get_label()
    assert "power-method step" in label and "BH-adjusted p < 0.05 for Δρ and P" in label


def test_legends_name_a_model_by_id_or_folder_never_a_cache_path(tmp_path) -> None:
    from steerformer.loading import BUNDLED_MINILM, bundled_minilm_path, model_display_name

    deep = tmp_path / "hub" / "models--x" / "snapshots" / ("a" * 40) / "my-model"
    deep.mkdir(parents=True)
    assert model_display_name(str(deep)) == "my-model"
    assert model_display_name("gpt2-medium") == "gpt2-medium"
    assert model_display_name("org/name") == "org/name"
    if bundled_minilm_path() is not None:
        assert model_display_name(str(bundled_minilm_path())) == BUNDLED_MINILM


def test_a_collapse_run_of_a_model_object_is_labelled_by_its_name_not_its_path(tmp_path) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from steerformer.collapse import collapse

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=32)).eval()
    folder = tmp_path / "cache" / "models--org--tiny" / "snapshots" / ("b" * 40)
    model.config._name_or_path = str(folder)
    folder.mkdir(parents=True)
    res = collapse(model, passes=1, n_prompts=2, length=4)
    assert res.label().startswith(folder.name + " ·")
    assert str(tmp_path) not in res.label()
