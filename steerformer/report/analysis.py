"""The page of an `analyze` folder: the model, the per-layer spectra, the power-method statistics with
their null intervals, the verdict in words, and the figures `analyze` drew — read from the folder
(``report.json`` and its PNGs), so it renders any earlier analyze output too."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from .html import Markup, esc, number, page, png_image, table

#: The spectra figures and the statistics' figures `analyze` writes, with what each shows.
SPECTRA_FIGURES = (("eigenvalues_complex_plane.png", "eigenvalues of each layer matrix F in the complex plane"),
                   ("top5_real_parts.png", "the five largest real parts across layers"),
                   ("real_part_histogram.png", "histogram of the real parts"))
STATS_FIGURES = (("power_method.png", "alignment ρ before and after each layer, against its baselines"),
                 ("cumulative.png", "alignment with the principal eigenvector of the cumulative product"),
                 ("histograms_last_layer.png", "alignment of the tokens at the last layer"),
                 ("token_trajectories.png", "token trajectories"),
                 ("prolonged_run.png", "the prolonged run of a shared-weight model"))


def _complex(z: object) -> str:
    if not isinstance(z, (list, tuple)) or len(z) != 2:
        return number(z)
    re_, im = z
    return f"{re_:.4g}" if im == 0 else f"{re_:.4g}{'+' if im >= 0 else '−'}{abs(im):.3g}j"


def _interval(r: Mapping, key: str, lo: str, hi: str, digits: int = 3) -> Markup:
    """``value [lo, hi]`` from a statistics row (the interval only where the row has it)."""
    value = number(r.get(key), digits)
    if lo in r and hi in r:
        value += f" <small>[{number(r[lo], digits)}, {number(r[hi], digits)}]</small>"
    return Markup(value)


def spectra_table(layers: list[dict]) -> str:
    rows = [[r["layer"], Markup(_complex(r.get("lambda1"))), Markup(_complex(r.get("lambda2"))), r.get("gap"),
             r.get("relative_gap"), f"{r.get('case')}{'*' if r.get('de_facto_case3') else ''}", r.get("v1v2_overlap")]
            for r in layers]
    return table(["layer", "λ1", "λ2", "gap", "rel. gap", "case", "|⟨v1,v2⟩|"], rows)


def statistics_table(stats: Mapping) -> str:
    rows = []
    for r in stats.get("layers", []):
        verdict = "power-method step" if r.get("power_method_step") else "no"
        if "beyond_chance" in r:
            verdict += "; beyond chance" if r["beyond_chance"] else "; not beyond chance"
        rows.append([r["layer"], r.get("rho_mean"), _interval(r, "delta_rho_mean", "delta_rho_mean_lo", "delta_rho_mean_hi"),
                     r.get("baseline_delta_mean"), _interval(r, "null_delta_mean", "null_delta_lo", "null_delta_hi"),
                     _interval(r, "P", "P_lo", "P_hi"), r.get("baseline_P"),
                     _interval(r, "null_P_mean", "null_P_lo", "null_P_hi"),
                     Markup(f"{number(r.get('p_delta_adjusted'))} / {number(r.get('p_P_adjusted'))}"), verdict])
    return table(["layer", "ρ", "Δρ [CI]", "Δρ̄ (baseline)", "null Δρ [interval]", "P [CI]", "P̄ (baseline)",
                  "null P [interval]", "adjusted p (Δρ / P)", "verdict"], rows)


def verdict_words(power: Mapping) -> str:
    """The verdict as sentences: how many layers act as a power-method step, how many beyond chance,
    and the floor the number of null draws puts on a p-value (why fewer draws can find none)."""
    controlled = power.get("controlled", {})
    lines = [f"<p class=verdict>{esc(controlled.get('summary') or power.get('summary', ''))}</p>"]
    test = controlled.get("meta", {}).get("test")
    if test:
        n = len(controlled.get("layers", []))
        draws, alpha = test["draws"], test["alpha"]
        need = next((k for k in range(1, n + 1) if n / (k * (draws + 1)) < alpha), None) \
            if test.get("correction") == "bh" else None
        floor = (f"With {draws} random-weight draws the smallest p-value a layer can reach is 1/{draws + 1} = "
                 f"{1 / (draws + 1):.3g}")
        if need is not None:
            floor += (f"; after the Benjamini–Hochberg correction across {n} layers a layer is beyond chance only "
                      f"when at least {need} layer(s) reach it")
        lines.append(f"<p>{esc(floor)} (more draws, <code>--null-draws</code>, lower that floor). A layer acts as a "
                     "power-method step when its alignment gain Δρ is positive and above the baseline Δρ̄, and the "
                     "share P of tokens that align more is above P̄; it is beyond chance when both Δρ and P beat "
                     "the random-weight null model.</p>")
    full = power.get("full_model")
    if full:
        lines.append(f"<p>Full model: {esc(full.get('summary', ''))}.</p>")
    return "".join(lines)


def analysis_page(folder: Path, doc: Mapping) -> str:
    """The page of the analyze output in ``folder`` (``doc``: its ``report.json``)."""
    meta, layers = doc.get("meta", {}), doc.get("layers", [])
    cfg = meta.get("config", {})
    model = meta.get("model_id", "?")
    head = (f"<h1>analyze: {esc(model)}</h1><p class=sub>{esc(cfg.get('model_type'))}, {esc(cfg.get('n_layers'))} "
            f"layers, d = {esc(cfg.get('d_model'))}, {esc(cfg.get('n_heads'))} heads · steerformer "
            f"{esc(meta.get('steerformer_version', ''))} · {esc(meta.get('created', ''))}</p>")
    parts = [head]
    power = doc.get("power_method")
    if power:
        parts.append(f"<section><h2>Verdict</h2>{verdict_words(power)}</section>")
        opts = power.get("options", {})
        level = round(100 * opts.get("ci", 0.95))
        parts.append("<section><h2>Power-method statistics (controlled dynamics)</h2>"
                     f"<p>{esc(opts.get('n_prompts'))} prompts of {esc(opts.get('n_tokens'))} random tokens, seed "
                     f"{esc(opts.get('seed'))}. Intervals: [CI] the {level} % bootstrap over prompts; [interval] the "
                     f"central {level} % of {esc(opts.get('null_draws'))} random-weight draws (the null model). "
                     f"p-values adjusted across layers ({esc(opts.get('correction'))}), α = {esc(opts.get('alpha'))}."
                     f"</p>{statistics_table(power.get('controlled', {}))}</section>")
    parts.append("<section><h2>Spectra of the layer matrices F = W_O·V</h2>"
                 "<p>Eigenvalues ordered by real part; case 1: a real, strictly dominant λ1; case 2: a dominant "
                 "complex pair (λ2 is the eigenvalue after the pair); case 3: none strictly dominant "
                 "(* de facto case 3: a tiny relative gap and nearly parallel v1, v2).</p>"
                 f"{spectra_table(layers)}</section>")
    figures = "".join(png_image(folder / f, alt) for f, alt in SPECTRA_FIGURES + (STATS_FIGURES if power else ()))
    if figures:
        parts.append(f"<section><h2>Figures</h2>{figures}</section>")
    parts.append("<section><h2>Files</h2><p>report.json, layers.csv, alignment.csv, eigenvalues.npz and the figures "
                 f"in this folder; recompute with <code>steerformer analyze {esc(model)} --out DIR</code>, this "
                 "page with <code>steerformer report DIR</code>.</p></section>")
    return page(f"analyze {model}", "\n".join(parts))
