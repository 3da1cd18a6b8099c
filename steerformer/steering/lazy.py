"""Steering a checkpoint that does not fit in memory (``steer CKPT --lazy``).

With ``solve="exact"`` and a fixed gain (``gain=`` or ``strength=``) the edit needs no forward pass:

    W_O' = W_O + γ u a,   a = wᵀV⁻¹    (MATH.md §5; least squares when V is singular)

so only V and W_O of the edited layer are read, with the project's lazy safetensors reader. The new
checkpoint is written next to the old one without ever building the model:

* every file of the checkpoint is copied byte for byte (kernel-side copies), except
* the model shards (``*.safetensors``): each gets a new header — the same tensors and offsets plus
  the ``steerformer`` metadata copy of the record that ``save_steered`` puts in every shard and
  ``verify`` compares — followed by its data streamed unchanged (kernel-side copy), except the
  edited tensor's bytes in the shard that holds it (same dtype and shape, so same size);
* the provenance ``save_steered`` writes: ``steerformer/record.json``,
  ``steerformer/original.safetensors`` (the original output weight) and a model card, so
  ``verify`` and ``unsteer`` work on it as on any steered checkpoint.

Peak memory is the imports plus a few d×d float64 matrices, whatever the checkpoint's size. The
stored weight is bit-identical to the in-memory ``steer(..., solve="exact", gain=...)``: the same
float64 formula on the same stored values, cast back to the stored dtype.

Not supported lazily (each refused with the reason): directions that need the model to run
(``token``, ``text``, contrastive), the gain search and ``min-norm`` (both need forward passes),
ALBERT untying, and a checkpoint that is already steered (use the in-memory path for chains).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
import types
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..errors import CheckpointError, bad_argument
from ..loading import SafetensorsReader, open_source, read_safetensors_file_header
from ..matrices import read_attention_weights, select_layers
from . import algebra
from . import direction as dirs
from .record import SteeringRecord

log = logging.getLogger(__name__)

#: Other weight formats are not copied: they would hold the unedited weights next to the edited ones.
SKIPPED_WEIGHT_FILES = ("*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.onnx",
                        "*.gguf")
_CHUNK = 16 << 20


def steer_checkpoint(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    direction: Any = None,
    *,
    eigvec: int | None = None,
    gain: float | None = None,
    strength: float | None = None,
    left: Any = None,
    layer: int = -1,
    solve: str = "exact",
    overwrite: bool = False,
    card: bool = True,
) -> SteeringRecord:
    """Write a steered copy of ``checkpoint`` (a local folder, the bundled MiniLM or a cached Hub
    id) to ``out`` without loading the model. ``direction``: array or ``.npy`` path, or
    ``eigvec=K`` (eigenvector of F_layer); ``gain`` (absolute) or ``strength`` (×|λ1(F_layer)|);
    ``left``: w (default u). Returns the record (also saved in ``out/steerformer/record.json``)."""
    from ..configs import SteerConfig
    from .edit import _stores_transposed, resolve_direction
    from .edits import Edit, Steering, tensor_sha256
    from .save import (CHAIN_FORMAT, METADATA_KEY, ORIGINAL_FILE, RECORD_FILE, SIDE_DIR, _file_hashes,
                       _payload_sha256, _tensor_specs, safetensors_hashes, write_atomically)
    from .spectrum import top_summary

    if solve != "exact":
        raise bad_argument("solve", solve, "'exact' for a lazy edit (min-norm fits a on states from forward passes)",
                           "Pass solve='exact' (CLI: --solve exact), or drop --lazy.")
    if gain is None and strength is None:
        raise bad_argument("gain", None, "a fixed gain= or strength= for a lazy edit (the gain search runs the model)",
                           "Pass --gain G or --strength S, or drop --lazy.")
    SteerConfig(strength=strength, gain=gain, solve=solve)  # the same checks as steer()
    if hasattr(direction, "direction_source"):
        raise bad_argument("direction", type(direction).__name__, "an array or .npy path for a lazy edit")
    source = open_source(checkpoint)
    if source.path is None or source.model is not None:
        raise bad_argument("checkpoint", str(checkpoint), "a checkpoint with *.safetensors weights for a lazy edit")
    src = Path(source.path)
    if (src / SIDE_DIR / RECORD_FILE).is_file():
        raise bad_argument("checkpoint", str(checkpoint), "an unsteered checkpoint for a lazy edit (this one is "
                           "already steered)", "Steer it in memory (without --lazy) to extend its chain of edits.")
    adapter = source.adapter
    L = select_layers(layer, adapter.n_layers, name="layer")[0]
    seq = adapter.layer_sequence()
    slot = seq[L]
    name = adapter.output_weight_name(slot)
    u, dsource = resolve_direction(None, source, L, direction=direction, eigvec=eigvec)
    w = u if left is None else dirs.check_vector(left, adapter.d_model, name="left", model_name=source.model_id)

    weights = read_attention_weights(source, [L], parts=("vo",))[L]  # float64 copies of V and W_O only
    V = weights.value_matrix()
    row = algebra.exact_row(V, w)
    if row.method == "lstsq":
        log.warning("V of layer %d is singular (cond %.3g): a = wᵀV⁺ by least squares", L, row.cond)
    spec_before = top_summary(None, factors=weights.layer_factors())  # |λ1| for the strength (top eigenvalues only)
    abs_l1 = spec_before["abs_lambda1"]
    g = float(gain) if gain is not None else float(strength) * abs_l1
    b_V = weights.value_bias_heads()  # per query head, like a (grouped-query layers repeat b_V)
    edit = Edit(module=name, layer=L, slot=slot, u=u.clone(), a=row.a.clone(), gain=g, kind="steer",
                solve=row.to_dict(), w=w.clone(), w_eff=V.T @ row.a,
                bias_coef=None if b_V is None else float(row.a @ b_V.to(torch.float64)),
                transposed=_stores_transposed(adapter))
    del weights, V

    reader = SafetensorsReader(src, prefix=adapter.base_model_prefix)
    try:
        original = reader.get(name).clone()  # stored dtype and layout
        full_key = reader._full_key(name)
        shard = reader.weight_map[full_key]
    finally:
        reader.close()
    new = edit.applied_weight(original).contiguous()  # the same float64 formula as the in-memory edit
    if not bool(torch.isfinite(new).all()):
        raise bad_argument("gain", g, "a gain whose edited weight stays finite", "Use a smaller gain.")
    edit.dtype, edit.device, edit.shape = str(original.dtype).replace("torch.", ""), "cpu", list(original.shape)
    edit.before_sha256, edit.after_sha256 = tensor_sha256(original), tensor_sha256(new)
    delta_norm = float(torch.linalg.norm(new.double() - original.double())
                       / torch.linalg.norm(original.double()).clamp_min(1e-300))
    w_eff = edit.w_eff
    record = SteeringRecord(
        model_id=source.model_id, model_commit=source.commit, model_type=adapter.model_type, layer=L, slot=slot,
        module=name, layers_changed=[k for k, s in enumerate(seq) if s == slot], untied=False, dtype=edit.dtype,
        direction=u.tolist(), direction_sha256=dirs.vector_hash(u), direction_source=dsource.to_dict(),
        target=u.tolist(), left=w.tolist(), left_sha256=dirs.vector_hash(w),
        gain=g, strength=g / abs_l1 if abs_l1 else None, solve=row.to_dict(),
        measure=None, target_alignment=None, target_reached=None, message="", curve=[],
        alignment_dynamics_before=None, alignment_dynamics_after=None, alignment_model_before=None,
        alignment_model_after=None, weight_change=delta_norm, spectrum_before=spec_before, spectrum_after=None,
        kl=None, kl_kind=None, state_cosine=None, through_ffn=None,
        original_sha256=edit.before_sha256, steered_sha256=edit.after_sha256, steerformer_version=__version__,
        w_eff_cos=float(w_eff @ w / (torch.linalg.vector_norm(w_eff) * torch.linalg.vector_norm(w)).clamp_min(1e-300)),
        effective_strength=abs(g) * abs(float(w_eff @ u)) / abs_l1 if abs_l1 else None,
        bias_shift_norm=edit.bias_shift_norm, edits=[edit],
    )
    from ..configs import SteerConfig

    # the options this edit honoured (the rest keep their defaults: --lazy refuses them)
    record.config = SteerConfig(gain=gain, strength=strength, layer=layer, solve=solve, report=False).to_dict()
    new_bytes = new.view(torch.uint8).numpy().tobytes() if new.numel() else b""
    del new
    # The chain payload save_steered writes, with every tensor's sha256 streamed from the source
    # (the edited tensor's from its new bytes); dtype/shape from the headers, which do not change.
    shards = sorted(p.name for p in src.glob("*.safetensors"))
    tensors: dict[str, str] = {}
    specs: dict[str, list] = {}
    for f in shards:
        tensors.update(safetensors_hashes(src / f))
        specs.update(_tensor_specs(src / f))
    tensors[full_key] = hashlib.sha256(new_bytes).hexdigest()

    def fill(tmp: Path) -> None:
        from safetensors.torch import save_file

        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src)
            if rel.parts[0] in (SIDE_DIR, ".cache") or not path.is_file() or rel.as_posix() in shards:
                continue
            if any(rel.match(p) for p in SKIPPED_WEIGHT_FILES):
                log.warning("%s is not copied: only safetensors weights are carried into a lazily steered checkpoint",
                            rel)
                continue
            if card and rel.as_posix() == "README.md":
                continue  # replaced by the steered model's card
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dst)  # follows HF-cache symlinks; sendfile on Linux
        if card:
            from .card import model_card

            model_card([record], model=types.SimpleNamespace(config=source.config), base_folder=src,
                       sentence_transformers=(tmp / "modules.json").is_file()).save(str(tmp / "README.md"))
        payload = {"format": CHAIN_FORMAT, **Steering(records=[record], originals={name: original}).to_dict(),
                   "originals": {name: edit.before_sha256}, "tensors": tensors, "tensor_specs": specs,
                   "files": _file_hashes(tmp)}
        payload["record_sha256"] = _payload_sha256(payload)
        meta = {METADATA_KEY: json.dumps(payload, separators=(",", ":"))}
        for f in shards:  # model shards: new header (+ metadata), data streamed
            rewrite_shard(src / f, tmp / f, {full_key: new_bytes} if f == shard else {}, meta)
        side = tmp / SIDE_DIR
        side.mkdir()
        (side / RECORD_FILE).write_text(json.dumps(payload, indent=1))
        save_file({name: original}, str(side / ORIGINAL_FILE), metadata={"format": "pt"})

    from ..outputs import STEERED

    write_atomically(out, fill, overwrite=overwrite, kind=STEERED, inputs=[src])  # never into the input
    return record


def rewrite_shard(src: Path, dst: Path, replace: dict[str, bytes], metadata: dict[str, str]) -> None:
    """Copy the safetensors file ``src`` to ``dst`` with the tensors of ``replace`` given new bytes
    (same size) and ``metadata`` merged into the header. The data is streamed: kernel-side copies
    of the untouched ranges, so memory stays flat whatever the shard's size."""
    size = src.stat().st_size
    header, meta, data_start = read_safetensors_file_header(src)  # validated before anything is copied
    with open(src, "rb") as f:
        spans = []
        for key, data in replace.items():
            info = header.get(key)
            if not isinstance(info, dict):
                raise CheckpointError(f"{src} holds no tensor {key!r}")
            begin, end = (int(x) for x in info["data_offsets"])
            if end - begin != len(data) or not 0 <= begin <= end <= size - data_start:
                raise CheckpointError(f"{src}: {key} spans bytes [{begin}, {end}) but the edited tensor has "
                                      f"{len(data)} bytes (or the span leaves the file)")
            spans.append((begin, end, data))
        meta.update(metadata)
        header["__metadata__"] = meta
        head = json.dumps(header, separators=(",", ":")).encode()
        head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
        with open(dst, "wb") as g:
            g.write(struct.pack("<Q", len(head)))
            g.write(head)
            pos = 0
            for begin, end, data in sorted(spans, key=lambda s: s[0]):
                _copy_range(f, g, data_start + pos, begin - pos)
                g.write(data)
                pos = end
            _copy_range(f, g, data_start + pos, size - data_start - pos)


def _copy_range(f, g, offset: int, count: int) -> None:
    """Copy ``count`` bytes of ``f`` from ``offset`` to ``g``'s position (copy_file_range when the
    kernel offers it, else a reused 16 MiB buffer)."""
    g.flush()
    done = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done < count:
                k = os.copy_file_range(f.fileno(), g.fileno(), count - done, offset + done)
                if k == 0:
                    raise CheckpointError(f"{f.name} is truncated")
                done += k
            g.seek(0, os.SEEK_END)
            return
        except OSError:  # filesystems without it (or across devices on old kernels): buffered copy
            g.seek(0, os.SEEK_END)
    buf = bytearray(min(_CHUNK, max(count - done, 1)))
    view = memoryview(buf)
    f.seek(offset + done)
    while done < count:
        k = f.readinto(view[:min(len(buf), count - done)])
        if not k:
            raise CheckpointError(f"{f.name} is truncated")
        g.write(view[:k])
        done += k
