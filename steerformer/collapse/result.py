"""What a collapse run measured: E, the mean pairwise cosine and the distance to the centroid
after every block of every pass, per prompt."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from ..configs import CollapseConfig
from ..errors import bad_argument
from ..loading import model_display_name
from ..results import JsonResult, save_figure, to_jsonable
from .plots import collapse_figure
from .store import RunStore

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
STATS = ("e", "pairwise", "centroid")


@dataclasses.dataclass
class CollapseResult(JsonResult):
    """``e``, ``pairwise``, ``centroid``: (passes, blocks, prompts); the ``*0`` arrays (prompts,)
    are the same statistics of the embedded prompts, before the first block. ``options`` holds the
    run's arguments, ``meta`` the model facts, dtype, device, pass seeds and timings.

    Speaks the result protocol (:mod:`steerformer.results`); :meth:`quantiles` gives the curves
    behind :meth:`summary`."""

    e: np.ndarray
    pairwise: np.ndarray
    centroid: np.ndarray
    e0: np.ndarray
    pairwise0: np.ndarray
    centroid0: np.ndarray
    token_ids: np.ndarray
    options: dict
    meta: dict

    @property
    def n_passes(self) -> int:
        return int(self.e.shape[0])

    @property
    def n_blocks(self) -> int:
        return int(self.e.shape[1])

    @property
    def n_prompts(self) -> int:
        return int(self.e.shape[2])

    def curve(self, stat: str = "e") -> np.ndarray:
        """(1 + passes·blocks, prompts): the embedding first, then block after block; row k ≥ 1 is
        the k-th block run (layer index k of the paper's figures)."""
        arr, first = getattr(self, stat), getattr(self, f"{stat}0")
        return np.concatenate([first[None], arr.reshape(-1, arr.shape[-1])], axis=0)

    def quantiles(self, stat: str = "e") -> dict[str, np.ndarray]:
        """Mean, std and :data:`QUANTILES` over prompts at every layer index."""
        c = self.curve(stat)
        return {"mean": c.mean(1), "std": c.std(1),
                **{f"q{int(round(q * 100)):02d}": v for q, v in zip(QUANTILES, np.quantile(c, QUANTILES, axis=1))}}

    @property
    def config(self):
        """The :class:`~steerformer.configs.CollapseConfig` the run used (count, length, precision
        and batch size as resolved)."""
        return CollapseConfig.from_dict(self.options)

    def summary(self) -> str:
        """The run in one line, then mean E (with its 5–95 % band) after a few pass counts."""
        o, s = self.options, self.quantiles("e")
        head = (f"{self.meta.get('model_id', '?')}: {self.n_passes} passes × {self.n_blocks} blocks over "
                f"{self.n_prompts} prompts ({o.get('weights')} weights, {'with' if o.get('ffn') else 'without'} FFN)")
        ks = sorted({0, *[p * self.n_blocks for p in (1, 10, 100, 1000) if p <= self.n_passes],
                     self.n_passes * self.n_blocks})
        return "\n".join([head] + [f"  after {k // self.n_blocks:>4} passes ({k:>6} blocks): E mean {s['mean'][k]:.3e}  "
                                    f"[q05 {s['q05'][k]:.2e}, q95 {s['q95'][k]:.2e}]" for k in ks])

    # ---- persistence -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Options, meta, sizes, final means and the :meth:`quantiles` curves (the collapse.json)."""
        return to_jsonable({
            "options": self.options, "meta": self.meta,
            "n_passes": self.n_passes, "n_blocks": self.n_blocks, "n_prompts": self.n_prompts,
            "layer_index": "0 = embedded prompts, k >= 1 = after the k-th block run (pass (k-1)//n_blocks)",
            "final": {s: float(getattr(self, s)[-1, -1].mean()) for s in STATS},
            "summary": {s: {k: v.tolist() for k, v in self.quantiles(s).items()} for s in STATS},
        })

    def to_npz(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        np.savez_compressed(path, token_ids=self.token_ids,
                            **{k: getattr(self, k) for k in (*STATS, *(f"{s}0" for s in STATS))},
                            options=json.dumps(to_jsonable(self.options)), meta=json.dumps(to_jsonable(self.meta)))
        return path

    @classmethod
    def from_npz(cls, path: str | os.PathLike) -> "CollapseResult":
        """Read ``collapse.npz`` (never unpickling); anything else is one clear error naming the file."""
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            res = cls(**{k: arrays[k] for k in (*STATS, *(f"{s}0" for s in STATS), "token_ids")},
                      options=json.loads(str(arrays["options"])), meta=json.loads(str(arrays["meta"])))
            if not (isinstance(res.options, dict) and isinstance(res.meta, dict)):
                raise ValueError("options/meta are not JSON objects")
            for k in STATS:
                a, a0 = getattr(res, k), getattr(res, f"{k}0")
                if a.dtype.kind != "f" or a.ndim != 3 or a0.shape != a.shape[2:]:
                    raise ValueError(f"array {k!r} has shape {a.shape} / dtype {a.dtype}")
        except Exception as exc:  # not a zip, pickled object arrays, missing arrays, bad JSON ...
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}" if str(exc) else type(exc).__name__
            raise bad_argument("run", str(path), f"a collapse.npz written by `steerformer collapse` ({why})",
                               "Pass the output folder of a collapse run.") from None
        return res

    @classmethod
    def load(cls, run: str | os.PathLike) -> "CollapseResult":
        """A finished run (``collapse.npz``) or the completed passes of an interrupted one."""
        run = Path(run)
        if run.is_file():
            return cls.from_npz(run)
        if (run / "collapse.npz").is_file():
            return cls.from_npz(run / "collapse.npz")
        store = RunStore(run)
        if not run.is_dir():
            raise bad_argument("run", str(run), "a collapse output folder or a collapse.npz file (no such path)")
        # stores with hashes are verified like a resume; older ones are read as they are
        done = store.verify() if (run / "run.json").is_file() and "integrity" in store.read_run() else \
            store.completed_passes()
        if done == 0:
            raise bad_argument("run", str(run), "a collapse output folder with at least one completed pass")
        info, emb, passes = store.read_run(), store.read_embedding(), store.read_passes(done)
        return cls(**{s: passes[s] for s in STATS}, **{f"{s}0": emb[s] for s in STATS},
                   token_ids=store.read_prompts(), options=info["options"], meta={**info["meta"], "partial": True})

    def save(self, out: str | os.PathLike, *, plots: bool = True) -> dict[str, Path]:
        """``collapse.json``, ``collapse.npz`` and the figure ``collapse.png`` in folder ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.to_json(out / "collapse.json")
        written = {"json": out / "collapse.json", "npz": self.to_npz(out / "collapse.npz")}
        if plots:
            written["figure"] = self.plot(out)[0]
        return written

    def label(self) -> str:
        o = self.options  # model_display_name: runs saved before names were cleaned carry a path
        return f"{model_display_name(self.meta.get('model_id', '?'))} · {o.get('weights')} · {'FFN' if o.get('ffn') else 'no FFN'}"

    def figure(self, stat: str = "e"):
        return collapse_figure([self], stat=stat)

    def plot(self, out: str | os.PathLike) -> list[Path]:
        """``collapse.png`` (E against the layer index) in folder ``out``."""
        return [save_figure(self.figure(), Path(out) / "collapse.png", tight=False)]
