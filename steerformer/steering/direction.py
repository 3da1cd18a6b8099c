"""A direction as a shareable artefact: :class:`Direction`, direction(s) in the residual stream per
layer with where they came from, saved as safetensors + JSON, published on the Hub with a card,
and converted to and from llama.cpp control vectors.

Layer N means the output of block N, in every tool (docs/ecosystem.md): transformers'
``hidden_states[N + 1]``, llama.cpp's ``direction.N``, repeng's ``directions[N]``. A direction
made at one layer (a contrastive direction, an array) answers for every layer; one made at several
layers (a control vector, per-layer directions) gives each layer its own and refuses a layer it
does not hold.

The folder (``Direction.save``):

    direction.safetensors   one tensor "layer.N" per layer, (k, d_model): k directions at that layer,
                            as given (not normalized: a control vector's norm is its strength)
    direction.json          format, model_id, revision, method, layers, d_model, the sha256 of the
                            source prompts (``prompts_sha256``), of each layer's vectors, metadata
    README.md               a card (library steerformer, base_model when the model id is a Hub id)
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError, FileFormatError, InvalidArgumentError, ModelNotFoundError, bad_argument
from ..files import check_regular
from ..loading import confined_file, display_name, hub_failure, name_looks_like_path, public_model_id
from ..outputs import DIRECTION, write_atomically
from ..results import read_json
from ..schemas import DirectionFile, checked
from ..version import __version__
from .common import added_vector, vector_hash
from .record import SteeringRecord
from .registry import method_of

DIRECTION_FORMAT = "steerformer.direction/1"
VECTORS_FILE = "direction.safetensors"
META_FILE = "direction.json"

CARD = """---
{yaml}
---

# {title}

{what} for **{base}**, saved by [steerformer](https://pypi.org/project/steerformer/): {k} vector(s)
of width {d} at layer(s) {layers} (layer N = the output of block N, transformers'
`hidden_states[N + 1]`, llama.cpp's `direction.N`).

    import steerformer as sf
    direction = sf.Direction.load("{repo}")
    sf.ablate(model, direction, writers="attention,mlp")        # remove it from every writer
    sf.steer(model, direction, layer=N)                          # steer toward it at layer N

| field | value |
|---|---|
{rows}
"""


def _entry(module: str, name: str) -> Any:
    # The verbs call up into steering's entry points, looked up when called: a Direction is data that
    # the direction sources (below steer and activation) read, so importing them here would be a cycle.
    return getattr(importlib.import_module(f"steerformer.steering.{module}"), name)


def _layer_key(layer: int) -> str:
    return f"layer.{int(layer)}"


@dataclasses.dataclass(eq=False)  # tensors have no truth value: compare .vectors yourself
class Direction:
    """Direction(s) in the residual stream per layer (module doc) with their provenance.

    ``vectors``: layer -> (d,) or (k, d) (k directions at that layer; kept as given, float64);
    ``model_id``/``revision``: the model they were read from; ``method``: how ("contrastive
    mean-diff", "control vector", ...); ``prompts_sha256``: the sha256 of each prompt list they
    were computed from (by role, e.g. positive/negative); ``metadata``: anything else (JSON)."""

    vectors: Mapping[int, Any]
    model_id: str | None = None
    revision: str | None = None
    method: str | None = None
    prompts_sha256: dict = dataclasses.field(default_factory=dict)
    metadata: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.vectors = _checked(self.vectors)
        self.prompts_sha256 = dict(self.prompts_sha256 or {})
        self.metadata = dict(self.metadata or {})

    def __repr__(self) -> str:
        ks = sorted({int(v.shape[0]) for v in self.vectors.values()})
        return (f"Direction({self.method or 'vectors'} of {self.model_id or 'an unnamed model'}, layers "
                f"{_span(self.layers)}, k={'/'.join(map(str, ks))}, d={self.d_model})")

    @property
    def layers(self) -> list[int]:
        return sorted(self.vectors)

    @property
    def d_model(self) -> int:
        return int(next(iter(self.vectors.values())).shape[1])

    @property
    def sha256(self) -> dict[str, str]:
        """sha256 of each layer's vectors (float64 bytes): their identity in records and cards."""
        return {_layer_key(n): vector_hash(v) for n, v in sorted(self.vectors.items())}

    def at(self, layer: int, *, name: str = "direction") -> torch.Tensor:
        """The (k, d) vectors for ``layer``: the layer's own, or the only layer's when the direction
        holds one (it answers for every layer); a layer it lacks is refused."""
        if layer in self.vectors:
            return self.vectors[layer]
        if self.method == "control vector":  # direction.N belongs to block N: never applied at another layer
            raise bad_argument(name, f"a control vector of layers {_span(self.layers)}",
                               f"a control vector holding direction.{layer} for layer {layer} (it holds "
                               f"{', '.join(f'direction.{n}' for n in self.layers[:8])} only)",
                               "Steer the layers it holds, or use a control vector made for this layer.")
        if len(self.vectors) == 1:
            return next(iter(self.vectors.values()))
        raise bad_argument(name, f"a direction of layers {_span(self.layers)}",
                           f"a direction for layer {layer} (it holds vectors for layers {_span(self.layers)} only)",
                           "Use the layers it holds (layers=...), or a direction made at this layer.")

    def vector(self, layer: int, *, name: str = "direction") -> torch.Tensor:
        """The one vector (d,) for ``layer``; more than one there is refused (a steering edit takes one)."""
        v = self.at(layer, name=name)
        if v.shape[0] != 1:
            raise bad_argument(name, f"{v.shape[0]} directions at layer {layer}", "one direction for a steering edit",
                               "Steer with one of them, or ablate them all (method='ablation').")
        return v[0]

    # ---- using it (as steering-vectors' SteeringVector.apply) -----------------------------------------
    def apply(self, model: Any, *, coeff: float = 1.0, layers: Any = None, positions: str = "all") -> Any:
        """``with direction.apply(model, coeff=c):`` — inside the block every forward of ``model`` adds
        c·v after each layer this direction holds (or after ``layers``), at every position (or all but
        the first, ``positions="skip-first"``); the hooks are removed on exit, also on an exception.
        The run-time hook :func:`~steerformer.steering.activation.activation_steering`; the weights
        are not touched."""
        return _entry("activation", "activation_steering")(model, self, layers=layers, coeff=coeff,
                                                           positions=positions)

    def steer(self, model: Any, **options: Any) -> Any:
        """Edit ``model``'s weights with this direction as u: :func:`~steerformer.steering.steer`
        ``(model, self, **options)`` (any method and its options, e.g. ``method="ablation"``,
        ``layer=``, ``max_kl=``); returns the record; ``unsteer(model)`` undoes it bit for bit."""
        return _entry("steer", "steer")(model, self, **options)

    # ---- conversions ---------------------------------------------------------------------------
    @classmethod
    def from_control_vector(cls, control: Any, *, model_id: str | None = None, name: str = "path") -> "Direction":
        """A llama.cpp / repeng control vector (``formats.ControlVector`` or a GGUF path) as one
        vector per layer: ``direction.N`` becomes layer N (the same state, docs/ecosystem.md).
        ``name``: the argument a bad file's one-line error names."""
        from ..formats import ControlVector, read_control_vector

        cv = control if isinstance(control, ControlVector) else read_control_vector(control, name=name)
        return cls({n: v.to(torch.float64)[None] for n, v in cv.directions.items()}, model_id=model_id,
                   method="control vector", metadata={"model_hint": cv.model_hint})

    @classmethod
    def from_record(cls, records: Any) -> "Direction":
        """The vectors a KL-calibrated steer adds (activation addition as weights, docs/math.md §5d):
        γ·u per layer, γ = α × the layer's residual norm (:func:`added_vector`): exactly what a
        bias edit adds to the output of block N (a weight edit adds γ·u·(a·z), a·z ≈ 1 on the probe). Several records (a checkpoint's chain) add up, as llama.cpp
        adds several files. As a control vector, strength 1.0 is that steer.

        ``records``: a :class:`~steerformer.steering.SteeringRecord` or a list of them
        (:func:`~steerformer.steering.read_records` reads a checkpoint's or a ``steer --record`` file)."""
        from ..formats import model_hint_of

        if isinstance(records, SteeringRecord):
            records = [records]
        adds = [(r, e) for r in records for e in r.edits if e.adds_vector]
        if not adds:
            kinds = sorted({e.kind for r in records for e in r.edits}) or ["none"]
            raise bad_argument("record", f"edits of kind {', '.join(kinds)}", "edits that add one fixed vector after "
                               "their block (kind add: a KL-calibrated steer of a causal LM); these change the "
                               "residual stream by an amount that depends on each token's input, which a control "
                               "vector cannot carry", "Export the steered model instead: steerformer export DIR "
                               "--format gguf (or peft).")
        vectors: dict[int, torch.Tensor] = {}
        for _, e in adds:
            vectors[int(e.layer)] = vectors.get(int(e.layer), 0) + added_vector(e)
        last = adds[-1][0]
        gains = {str(n): float(v.norm()) for n, v in sorted(vectors.items())}
        scale = (f"calibrated: strength 1.0 adds what the steer added, {method_of(last).gain_text(last)}; "
                 f"{last.message}")
        return cls({n: v[None] for n, v in vectors.items()}, model_id=last.model_id, revision=last.model_commit,
                   method="calibrated steer", metadata={
                       "model_hint": model_hint_of(last.model_type), "scale": scale, "gain": gains, "kl": last.kl,
                       "kl_kind": last.kl_kind})

    def to_control_vector(self, model_hint: str | None = None) -> Any:
        """llama.cpp's control vector of this direction (one vector per layer, N >= 1): a
        ``formats.ControlVector`` (``.save(path)`` writes the GGUF), its ``scale`` note saying what
        strength 1.0 means (the calibrated steer for :meth:`from_record`, else the vectors as
        stored: unit vectors from ``direction make``). ``model_hint``: the model's architecture
        name (default the one recorded with the direction)."""
        from ..formats import ControlVector

        many = [n for n, v in self.vectors.items() if v.shape[0] != 1]
        if many:
            raise bad_argument("direction", f"{self.vectors[many[0]].shape[0]} directions at layer {many[0]}",
                               "one vector per layer (a control vector adds one vector per layer)")
        hint = model_hint or self.metadata.get("model_hint")
        norms = ", ".join(f"layer {n}: {float(v[0].norm()):.4g}" for n, v in sorted(self.vectors.items()))
        scale = self.metadata.get("scale") or (
            f"as stored: strength S adds S x these vectors (norms {norms}); a unit vector at strength 1 barely moves "
            "a model: steer with steerformer and export the steered checkpoint for the calibrated strength")
        return ControlVector({n: v[0] for n, v in self.vectors.items()}, hint,
                             {"scale": scale, "source": f"{self.method or 'vectors'} of {self.model_id or 'a model'}"})

    # ---- files ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON of ``direction.json``: everything but the vectors, plus their sha256."""
        return {"format": DIRECTION_FORMAT, "model_id": self.model_id, "revision": self.revision, "method": self.method,
                "layers": self.layers, "d_model": self.d_model,
                "k": {str(n): int(v.shape[0]) for n, v in sorted(self.vectors.items())},
                "prompts_sha256": self.prompts_sha256, "sha256": self.sha256, "metadata": self.metadata,
                "steerformer_version": __version__}

    def save(self, directory: str | os.PathLike, *, overwrite: bool = False, card: bool = True,
             repo_id: str | None = None) -> Path:
        """Write the folder of the module doc atomically; returns it. A non-empty ``directory`` is
        replaced only with ``overwrite`` and only when it holds an earlier direction. ``repo_id``:
        the Hub id the card's example loads (default the folder's name)."""
        def fill(tmp: Path) -> None:
            save_file({_layer_key(n): v.contiguous() for n, v in sorted(self.vectors.items())},
                      str(tmp / VECTORS_FILE), metadata={"format": DIRECTION_FORMAT})
            (tmp / META_FILE).write_text(json.dumps(self.to_dict(), indent=1))
            if card:
                (tmp / "README.md").write_text(self.card(repo_id or Path(directory).name))

        # never into (or around) the checkpoint it was made from: a local folder the model id names
        return write_atomically(directory, fill, overwrite=overwrite, kind=DIRECTION, inputs=[self.model_id])

    def card(self, repo_id: str = "THIS_REPO") -> str:
        """The README.md of the folder (Hub model card with YAML metadata)."""
        from huggingface_hub import ModelCardData

        base_id = public_model_id(self.model_id) if self.model_id else None
        data = ModelCardData(base_model=base_id, library_name="steerformer",
                             tags=["steerformer", "steering", "steering-vector", "direction"])
        rows = [("method", self.method), ("model", self.model_id), ("revision", self.revision),
                *((f"sha256 of the {role} prompts", f"`{h}`") for role, h in sorted(self.prompts_sha256.items())),
                *((f"sha256 of {key}", f"`{h}`") for key, h in self.sha256.items())]
        k = "/".join(str(n) for n in sorted({int(v.shape[0]) for v in self.vectors.values()}))
        name = display_name(self.model_id) if self.model_id else "a model"
        return CARD.format(yaml=data.to_yaml(), title=f"{self.method or 'Direction'} — {name}", repo=repo_id,
                           what=f"A {self.method or 'steering'} direction", base=name, k=k, d=self.d_model,
                           layers=_span(self.layers),
                           rows="\n".join(f"| {a} | {b} |" for a, b in rows if b is not None))

    @classmethod
    def load(cls, source: str | os.PathLike, *, revision: str | None = None,
             endpoint: str | None = None) -> "Direction":
        """A direction from a folder written by :meth:`save`, or from a Hub repo id (read from the
        Hugging Face cache, or downloaded from ``endpoint``, default ``HF_ENDPOINT``); the vectors are
        checked against their recorded sha256."""
        folder = Path(source).expanduser()
        if not folder.is_dir():
            folder = _download(str(source), revision, endpoint)
        return read_direction(folder)

    def push_to_hub(self, repo_id: str, *, private: bool = False, token: str | None = None,
                    endpoint: str | None = None, commit_message: str | None = None, revision: str | None = None,
                    create_pr: bool = False, timeout: float | None = None) -> str:
        """Save the folder with its card and upload it to ``repo_id`` (arguments as
        :func:`~steerformer.steering.push_to_hub`; ``timeout=None``: its default, 30 s); returns the
        commit URL."""
        # imported here: steering with a Direction in memory imports no upload code (issue 26)
        from .upload import DEFAULT_TIMEOUT, hub_target, upload_folder

        target = hub_target(repo_id, private=private, token=token, endpoint=endpoint, commit_message=commit_message,
                            revision=revision, create_pr=create_pr,
                            timeout=DEFAULT_TIMEOUT if timeout is None else timeout)
        with tempfile.TemporaryDirectory(prefix="steerformer-direction-") as tmp:
            folder = self.save(Path(tmp) / "direction", repo_id=repo_id)
            return upload_folder(target, folder, default_message="Upload direction (steerformer)")


def read_direction(folder: str | os.PathLike) -> Direction:
    """The direction saved in ``folder`` (:meth:`Direction.save`); a missing file, a vector whose
    sha256 differs from the record, or a layer the record does not name is one
    :class:`~steerformer.errors.CheckpointError` line."""
    folder = Path(folder)
    if not (folder / META_FILE).exists() or not (folder / VECTORS_FILE).exists():
        raise CheckpointError(f"{folder} is not a direction folder: it needs {META_FILE} and {VECTORS_FILE} "
                              "(written by Direction.save)")
    # read only as regular files inside the folder (or a Hub snapshot's blobs): never through a link out
    meta_path = confined_file(folder, META_FILE, what="the direction", kind="direction folder")
    vec_path = confined_file(folder, VECTORS_FILE, what="the direction", kind="direction folder")
    try:
        meta = checked(read_json(meta_path), DirectionFile, folder / META_FILE)
    except FileFormatError as exc:
        raise CheckpointError(str(exc)) from None
    try:
        tensors = load_file(str(check_regular(vec_path)))
    except Exception as exc:  # safetensors errors on a corrupt file
        raise CheckpointError(f"{folder}: unreadable direction ({type(exc).__name__}: {exc})") from None
    vectors = {}
    for key, t in tensors.items():
        if re.fullmatch(r"layer\.[0-9]{1,6}", key) is None:  # ASCII digits: "layer.²" is no layer
            raise CheckpointError(f"{folder / VECTORS_FILE}: tensor {key[:40]!r} is not named layer.N (N a layer "
                                  "number)")
        vectors[int(key[6:])] = t
    try:
        d = Direction(vectors, model_id=meta.model_id, revision=meta.revision, method=meta.method,
                      prompts_sha256=meta.prompts_sha256 or {},
                      metadata=meta.metadata.model_dump(exclude_none=True) if meta.metadata else {})
    except InvalidArgumentError as exc:  # the vectors' shapes, dtypes, values
        raise CheckpointError(f"{folder / VECTORS_FILE}: {exc}") from None
    recorded = meta.sha256 or {}
    if recorded != d.sha256:
        bad = sorted(set(recorded) ^ set(d.sha256) | {k for k in recorded if recorded.get(k) != d.sha256.get(k)})
        raise CheckpointError(f"{folder}: the vectors of {', '.join(bad)[:200]} do not match the sha256 recorded in "
                              f"{META_FILE} (changed or corrupt)")
    return d


def _download(repo_id: str, revision: str | None, endpoint: str | None) -> Path:
    from huggingface_hub import snapshot_download

    if name_looks_like_path(repo_id) or repo_id.count("/") != 1:
        raise bad_argument("direction", repo_id, "a direction folder (direction.json + direction.safetensors) or a "
                           "Hub repo id 'namespace/name'", "Check the path.")
    try:
        return Path(snapshot_download(repo_id, revision=revision, endpoint=endpoint,
                                      allow_patterns=[META_FILE, VECTORS_FILE, "README.md"]))
    except Exception as exc:  # offline, unknown repo, network: one line
        raise ModelNotFoundError(f"direction {repo_id!r} {hub_failure(exc)}.") from None


def _checked(vectors: Mapping[int, Any]) -> dict[int, torch.Tensor]:
    if not isinstance(vectors, Mapping) or not vectors:
        raise bad_argument("vectors", type(vectors).__name__, "a non-empty mapping layer -> (d,) or (k, d) vectors")
    out, width = {}, None
    for layer, v in sorted(vectors.items()):
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or int(layer) < 0:
            raise bad_argument("vectors", f"layer {layer!r}", "layers >= 0 (layer N = the output of block N)")
        t = torch.as_tensor(v.detach().cpu() if isinstance(v, torch.Tensor) else np.asarray(v))
        t = t[None] if t.ndim == 1 else t
        if t.ndim != 2 or not t.is_floating_point() or 0 in t.shape:
            raise bad_argument(f"vectors[{layer}]", tuple(t.shape), "a float vector (d,) or k vectors (k, d)")
        if width is not None and t.shape[1] != width:
            raise bad_argument(f"vectors[{layer}]", f"width {t.shape[1]}", f"width {width} like the other layers")
        if not torch.isfinite(t).all() or not bool((t != 0).any(dim=1).all()):
            raise bad_argument(f"vectors[{layer}]", "non-finite or zero vectors", "finite, non-zero vectors")
        width = int(t.shape[1])
        out[int(layer)] = t.to(torch.float64, copy=True).contiguous()  # never a view of the caller's array
    return out


def _span(layers: list[int]) -> str:
    if len(layers) > 2 and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}..{layers[-1]}"
    return ", ".join(map(str, layers))
