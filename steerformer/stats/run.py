"""The power-method experiment of one model, as `analyze` runs it: controlled dynamics (docs/math.md §3),
the full-model variant (Figs. 10/11) and, for shared-weight models, the prolonged K·L run (Fig. 6(c)),
each reduced to :class:`AlignmentStats` against the spectra `analyze` already computed."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from .._text import csv_text
from ..dynamics import run_dynamics
from ..configs import SEED, StatsConfig, progress_bar
from ..errors import InvalidArgumentError, bad_argument
from ..loading import ModelSource, as_source
from ..results import JsonResult, read_json
from ..matrices import LayerMatrices, layer_matrices, read_attention_weights, select_layers
from ..spectra import Spectra, spectra as compute_spectra
from .alignment import alignment_stats
from .full_model import model_hidden_states
from .null import annotate, null_statistics
from .result import COLUMNS, AlignmentStats

log = logging.getLogger(__name__)

#: Default K of the prolonged run (K·L layers) for shared-weight models.
DEFAULT_PROLONG = 10
#: A layer beyond chance in fewer than this share of the token seeds is marked unstable (9 of 10).
STABLE_SHARE = 0.9


@dataclasses.dataclass
class PowerMethodReport(JsonResult):
    """Statistics of the controlled dynamics, and where run, of the full model and the prolonged run."""

    controlled: AlignmentStats
    full_model: AlignmentStats | None
    prolonged: AlignmentStats | None
    options: dict
    #: pre-LN models, layer_norm=None: the controlled dynamics with the model's pre-attention norm
    controlled_layer_norm: AlignmentStats | None = None

    def variants(self) -> dict[str, AlignmentStats]:
        return {k: v for k, v in (("controlled", self.controlled), ("controlled_layer_norm", self.controlled_layer_norm),
                                  ("full_model", self.full_model), ("prolonged", self.prolonged)) if v is not None}

    def summary(self) -> str:
        return self.controlled.summary()

    def verdict_lines(self) -> list[str]:
        return self.controlled.verdict_lines()

    def to_dict(self) -> dict:
        return {"options": self.options, "summary": self.summary(),
                **{name: st.to_dict() for name, st in self.variants().items()}}

    @classmethod
    def load(cls, out_dir: str | Path, doc: dict | None = None) -> "PowerMethodReport":
        """The statistics saved in ``out_dir``: ``doc`` is this report's :meth:`to_dict` (read from
        ``power_method.json``, or the ``power_method`` entry of `analyze`'s report.json, when None)."""
        out = Path(out_dir)
        if doc is None:
            doc = read_json(out / "power_method.json")
        parts = {name: AlignmentStats.from_dict(doc[name], out / f"alignment_tokens_{name}.npz") if name in doc else None
                 for name in ("controlled", "controlled_layer_norm", "full_model", "prolonged")}
        return cls(**parts, options=doc["options"])

    def to_csv(self, path: str | Path | None = None) -> str:
        """Every per-step number of every variant: one row per (variant, step), :data:`COLUMNS`."""
        rows = ([name] + [r.get(c, "") for c in COLUMNS] for name, st in self.variants().items() for r in st.layers)
        return csv_text(("variant",) + COLUMNS, rows, path)

    def save(self, out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
        """power_method.json, alignment.csv, one alignment_tokens_<variant>.npz per variant (and the
        figures) in ``out_dir``; returns the paths by file name (``csv`` for alignment.csv)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"power_method.json": out / "power_method.json", "csv": out / "alignment.csv"}
        self.to_json(paths["power_method.json"])
        self.to_csv(paths["csv"])
        for name, st in self.variants().items():
            p = out / f"alignment_tokens_{name}.npz"
            st.to_npz(p)
            paths[p.name] = p
        if plots:
            paths.update({p.name: p for p in self.plot(out)})
        return paths

    def plot(self, out_dir: str | Path, title: str = "") -> list[Path]:
        """power_method.png (Fig. 2(b)/7; the full model side by side as in Figs. 10/11),
        cumulative.png (Fig. 8), histograms_last_layer.png (Fig. 2(a)(b)), token_trajectories.png
        (Fig. 6(a)(b)) and, for shared-weight models, prolonged_run.png (Fig. 6(c))."""
        from . import plots

        out = Path(out_dir)
        ln = self.controlled_layer_norm
        cols = [self.controlled] + ([ln] if ln is not None else []) + ([self.full_model] if self.full_model is not None else [])
        labels = ["controlled dynamics (eq. 1)" + (", with the pre-attention norm" if self.options.get("layer_norm") else "")] \
            + (["controlled dynamics with the model's pre-attention norm"] if ln is not None else []) \
            + (["full model (embeddings, FFN, LayerNorm)"] if self.full_model else [])
        figs = {
            "power_method.png": plots.power_method_rows(cols, labels, title),
            "histograms_last_layer.png": plots.last_layer_histograms(self.controlled, title),
            "token_trajectories.png": plots.token_trajectories(self.controlled, title),
        }
        if self.controlled.meta.get("cumulative"):
            figs["cumulative.png"] = plots.cumulative(self.controlled, title)
        if self.prolonged is not None:
            figs["prolonged_run.png"] = plots.token_trajectories(
                self.prolonged, f"{title} prolonged: {self.prolonged.meta['n_steps']} layers".strip())
        return [plots.save_figure(fig, out / name) for name, fig in figs.items()]


def prolonged_stats(source: ModelSource, spectra: Spectra, passes: int, *, tokens: Any, n_prompts: int,
                    n_tokens: int, dyn: dict, progress: Any = None, **common: Any) -> AlignmentStats:
    """Statistics of the prolonged run (the layer stack applied ``passes`` times, no cumulative
    product), streamed pass by pass (issue 14 item 5): each pass starts from the previous pass's
    last states, so only one pass's states (L + 1 of them) are ever held — memory does not grow
    with ``passes``. The steps are the same operations on the same states as one
    ``run_dynamics(..., repeat=passes)``, so the result is identical to the statistics of that
    whole trajectory (``tests/stats/test_prolonged_streaming.py`` compares them)."""
    parts: list[AlignmentStats] = []
    x = tokens
    for p in range(passes):
        kw = dyn if p == 0 else {**dyn, "normalize_initial": False}
        traj = run_dynamics(source, x, n_prompts=n_prompts, n_tokens=n_tokens, repeat=1, **kw)
        x = traj.states[-1].clone()
        parts.append(alignment_stats(traj, spectra, cumulative=False, variant="prolonged",
                                     progress=progress, **common))
        del traj
    return _concat_steps(parts, passes)


def stability(main: AlignmentStats, seeds: Sequence[int], trajectory: Any, spectra: Spectra, common: dict,
              null_run: dict | None, test: dict, progress: bool | str = False) -> None:
    """How often each step's verdicts hold over the main run and the runs ``trajectory(seed)`` of the
    other token ``seeds``, one at a time (docs/math.md §4c): ``power_method_step_share`` and, with the null model,
    ``beyond_chance_share`` and ``unstable`` (beyond chance in the main run but in fewer than
    :data:`STABLE_SHARE` of the seeds) in every record of ``main``; the per-seed verdicts in
    ``main.meta["stability"]``. ``progress``: a bar over the seeds."""
    all_seeds = [main.meta["options"].get("seed", 0), *seeds]
    verdicts = {"power_method_step": [[bool(r["power_method_step"]) for r in main.layers]]}
    if null_run is not None:
        verdicts["beyond_chance"] = [[bool(r["beyond_chance"]) for r in main.layers]]
    for seed in progress_bar(progress, "stability over seeds", seeds, unit="seed"):
        tr = trajectory(seed)
        st = alignment_stats(tr, spectra, cumulative=False, **{**common, "ci": 0})
        verdicts["power_method_step"].append([bool(r["power_method_step"]) for r in st.layers])
        if null_run is not None:
            annotate(st.layers, null_statistics(tokens=tr.states[0], **null_run,
                                                progress=progress and f"seed {seed}: null draws"), **test)
            verdicts["beyond_chance"].append([bool(r["beyond_chance"]) for r in st.layers])
    for i, rec in enumerate(main.layers):
        for name, runs_ in verdicts.items():
            rec[f"{name}_share"] = float(np.mean([v[i] for v in runs_]))
        if null_run is not None:
            rec["unstable"] = bool(rec["beyond_chance"] and rec["beyond_chance_share"] < STABLE_SHARE)
    main.meta["stability"] = {"seeds": [int(s) for s in all_seeds], "stable_share": STABLE_SHARE, **verdicts}


def _concat_steps(parts: list[AlignmentStats], passes: int) -> AlignmentStats:
    """One AlignmentStats for consecutive runs (steps renumbered, per-token values stacked; the
    histograms and the run options are those of the last step / the first run, repeat = passes)."""
    layers, offset = [], 0
    for part in parts:
        layers += [{**rec, "step": rec["step"] + offset} for rec in part.layers]
        offset += len(part.layers)
    first, last = parts[0], parts[-1]
    per_token = {name: np.concatenate([part.per_token[name] for part in parts]) for name in first.per_token}
    meta = {**first.meta, "n_steps": len(layers), "options": {**first.meta["options"], "repeat": int(passes)}}
    return AlignmentStats(meta=meta, layers=layers, per_token=per_token, histograms=last.histograms,
                          lengths=first.lengths)


def power_method_stats(model: Any, config: StatsConfig | None = None, *, matrices: LayerMatrices | None = None,
                       spectra: Spectra | None = None, layers: Sequence[int] | None = None,
                       dtype: torch.dtype = torch.float64, device: str | None = None, progress: bool = False,
                       **options: Any) -> PowerMethodReport:
    """Run the controlled dynamics (``n_prompts × n_tokens`` random tokens, or ``tokens``), the
    full-model variant on ``prompts`` (built-in sentences when None; skipped when the model has no
    tokenizer and no prompts were asked for) and, for shared-weight models, a prolonged run of
    ``prolong`` = K passes (default 10; pass K for any model), then their statistics.

    Options come as a :class:`StatsConfig` or as its fields by keyword (``n_prompts=4``).
    ``matrices``/``spectra``: reuse what `analyze` computed (one eig per distinct ALBERT slot).
    """
    cfg = dataclasses.replace(config or StatsConfig(), **options) if options else (config or StatsConfig())
    tokens, prompts, prolong, cumulative = cfg.tokens, cfg.prompts, cfg.prolong, cfg.cumulative
    if cfg.seeds > 1 and tokens is not None:
        raise bad_argument("seeds", cfg.seeds, "1 with user-given tokens (the seeds draw new random tokens)",
                           "Drop tokens= to repeat with random tokens, or seeds= to use your tokens.")
    source = as_source(model)
    if matrices is None:
        # Read Q/K/V/O once: this fills source.attention_cache, which layer_matrices reads V/O from.
        read_attention_weights(source, select_layers(layers, source.adapter.n_layers), dtype=dtype, device=device)
        matrices = layer_matrices(source, layers)
    if spectra is None:
        spectra = compute_spectra(matrices, dtype=dtype, device=device)
    ids = matrices.layer_ids
    weights = read_attention_weights(source, ids, dtype=dtype, device=device)
    # docs/math.md §3 / Appendix B: whether the pre-attention norm of a pre-LN model is part of the
    # "attention sublayer" is ambiguous; by default both readings run (docs/statistics.md).
    pre_ln = any(source.adapter.pre_attention_norm(k) is not None for k in ids)
    both = cfg.layer_norm is None and pre_ln
    layer_norm = bool(cfg.layer_norm)
    dyn = dict(seed=cfg.seed, tau=cfg.tau, layers=ids, layer_norm=layer_norm, bias=cfg.bias, weights=weights,
               dtype=dtype, device=device, normalize_initial=cfg.normalize_initial)
    traj = run_dynamics(source, tokens, n_prompts=cfg.n_prompts, n_tokens=cfg.n_tokens, **dyn)
    common = dict(spectra_layers=ids, matrices=matrices, ci=cfg.ci, bootstrap=cfg.bootstrap, ci_seed=SEED)
    controlled = alignment_stats(traj, spectra, cumulative=cumulative, progress=progress and "statistics", **common)
    options = {"n_prompts": controlled.meta["n_prompts"], "n_tokens": cfg.n_tokens, "seed": cfg.seed,
               "tau": cfg.tau, "layer_norm": layer_norm, "layer_norm_both": both, "bias": cfg.bias,
               "user_tokens": tokens is not None, "normalize_initial": cfg.normalize_initial,
               "cumulative": cumulative, "null_draws": int(cfg.null_draws), "alpha": cfg.alpha,
               "correction": cfg.correction, "ci": cfg.ci, "bootstrap": cfg.bootstrap, "seeds": cfg.seeds}
    bases: dict = {}  # the null's eigenproblems depend on the weights only: solved once for all seeds
    null_run = dict(source=source, weights=weights, layers=ids, draws=int(cfg.null_draws), tau=cfg.tau, bias=cfg.bias,
                    layer_norm=layer_norm, dtype=dtype, device=device, bases=bases)
    test = dict(alpha=cfg.alpha, correction=cfg.correction, level=cfg.ci or 0.95)
    if cfg.null_draws:
        annotate(controlled.layers, null_statistics(tokens=traj.states[0], **null_run,
                                                    progress=progress and f"null model ({int(cfg.null_draws)} draws)"),
                 **test)
        controlled.meta["null_draws"] = int(cfg.null_draws)
        controlled.meta["test"] = {"draws": int(cfg.null_draws), "alpha": cfg.alpha, "correction": cfg.correction,
                                   "smallest_p": 1 / (int(cfg.null_draws) + 1), "seed": SEED}
    if cfg.seeds > 1:
        def trajectory(seed: int):
            return run_dynamics(source, None, n_prompts=cfg.n_prompts, n_tokens=cfg.n_tokens, **{**dyn, "seed": seed})

        stability(controlled, [cfg.seed + i for i in range(1, cfg.seeds)], trajectory, spectra, common,
                  null_run if cfg.null_draws else None, test,
                  progress=progress and f"stability over {cfg.seeds - 1} more seeds")
    with_ln = None
    if both:
        traj_ln = run_dynamics(source, traj.states[0], **{**dyn, "layer_norm": True, "normalize_initial": False})
        with_ln = alignment_stats(traj_ln, spectra, cumulative=False, variant="controlled_layer_norm",
                                  progress=progress and "with the pre-attention norm", **common)

    full = None
    if cfg.full_model:
        if ids != list(range(source.adapter.n_layers)):
            options["full_model_skipped"] = "only runs on all layers (the hidden states chain every layer)"
        else:
            try:
                with progress_bar(progress, "full model: hidden states of the prompts", total=1) as bar:
                    hs = model_hidden_states(source, prompts, device=device)
                    bar.update(1)
            except InvalidArgumentError as exc:
                if prompts is not None:  # asked for explicitly: the user must hear why it failed
                    raise
                # Default run on a model without a usable tokenizer (or with per-group hidden states):
                # the controlled statistics still stand on their own.
                options["full_model_skipped"] = str(exc)
                log.warning("full-model variant skipped: %s", exc)
            else:
                full = alignment_stats(hs, spectra, cumulative=cumulative, variant="full_model",
                                       progress=progress and "full model", **common)
                options["full_model_prompts"] = len(hs.lengths)

    K = prolong if prolong is not None else (DEFAULT_PROLONG if source.adapter.shares_weights else None)
    pro = None
    if K is not None:
        # F^k of a shared layer has v1 as principal eigenvector: the cumulative statistic adds nothing.
        pro = prolonged_stats(source, spectra, int(K), tokens=tokens, n_prompts=cfg.n_prompts,
                              n_tokens=cfg.n_tokens, dyn=dyn, progress=progress and "prolonged", **common)
        options["prolong"] = int(K)
    return PowerMethodReport(controlled=controlled, full_model=full, prolonged=pro, options=options,
                             controlled_layer_norm=with_ln)
