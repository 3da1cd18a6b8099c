"""Saving a steered model as a plain transformers checkpoint, and undoing/verifying it from disk.

Layout written by :func:`save_steered` (atomic: a temporary sibling folder moved into place):

    config.json, model.safetensors ...   what ``save_pretrained`` writes; ``AutoModel`` loads it
                                          (safetensors metadata key ``steerformer`` holds the records)
    tokenizer files                       when the tokenizer is known
    README.md                             model card (template ``model_cards/steered.md``)
    steerformer/record.json               the SteeringRecords + ALBERT untie info
    steerformer/original.safetensors      the original output weights (bit-exact undo)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, bad_argument
from ..loading import load_tokenizer
from .edit import STATE_ATTR, tensor_sha256
from .record import SteeringRecord
from .untie import retie

log = logging.getLogger(__name__)

SIDE_DIR = "steerformer"
RECORD_FILE = "record.json"
ORIGINAL_FILE = "original.safetensors"
METADATA_KEY = "steerformer"


# ---- atomic folder writes ----------------------------------------------------------------------
def _check_target(directory: Path, overwrite: bool) -> None:
    if directory.exists() and not directory.is_dir():
        raise bad_argument("directory", str(directory), "a folder path (this is a file)")
    if directory.is_dir() and any(directory.iterdir()) and not overwrite:
        raise bad_argument("directory", str(directory), "an empty or missing folder",
                           "Pass overwrite=True (CLI: --overwrite) to replace it.")


def write_atomically(directory: str | os.PathLike, fill, *, overwrite: bool = False) -> Path:
    """Create a temporary sibling folder, ``fill(tmp)`` it, then move it to ``directory``. On any
    error the temporary folder is removed and ``directory`` is left as it was."""
    target = Path(directory).expanduser().resolve()
    _check_target(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        fill(tmp)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, old / "x")
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


# ---- safetensors metadata ----------------------------------------------------------------------
def add_safetensors_metadata(path: Path, extra: dict[str, str]) -> None:
    """Merge ``extra`` into a safetensors file's ``__metadata__`` by rewriting only its header and
    streaming the tensor bytes (no tensor is loaded: peak memory stays at one copy buffer)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        meta = dict(header.get("__metadata__") or {})
        meta.update(extra)
        header["__metadata__"] = meta
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as g:
            g.write(struct.pack("<Q", len(raw)))
            g.write(raw)
            shutil.copyfileobj(f, g, 16 << 20)
    os.replace(tmp, path)


def read_safetensors_metadata(path: Path) -> dict[str, str]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return dict(json.loads(f.read(n)).get("__metadata__") or {})


# ---- save --------------------------------------------------------------------------------------
def save_steered(model: Any, directory: str | os.PathLike, *, overwrite: bool = False, tokenizer: Any = None,
                 card: bool = True) -> Path:
    """Write the steered ``model`` to ``directory`` as a plain transformers checkpoint with its
    provenance (see module doc). Refuses a non-empty ``directory`` unless ``overwrite``."""
    from safetensors.torch import save_file

    from .st_stack import as_sentence_transformer, copy_module_stack, inner_model

    st_model = as_sentence_transformer(model)  # a SentenceTransformer: save its whole module stack
    if st_model is not None:
        model = inner_model(st_model)
    state = getattr(model, STATE_ATTR, None)
    if state is None:
        raise bad_argument("model", type(model).__name__, "a model edited by steerformer.steering.steer",
                           "Steer it first, or save it with model.save_pretrained(...).")
    records: list[SteeringRecord] = state["records"]
    tok = load_tokenizer(model, tokenizer)
    payload = {"records": [r.to_dict() for r in records], "untie": state.get("untie")}

    def fill(tmp: Path) -> None:
        if st_model is not None:
            st_model.save(str(tmp), create_model_card=False)
        else:
            model.save_pretrained(str(tmp))
            copy_module_stack(model, tmp)  # sentence-transformers files of the source folder, if any
        side = tmp / SIDE_DIR
        side.mkdir()
        (side / RECORD_FILE).write_text(json.dumps(payload, indent=1))
        save_file({k: v.detach().contiguous().cpu() for k, v in state["originals"].items()}, str(side / ORIGINAL_FILE),
                  metadata={"format": "pt"})
        compact = json.dumps(payload, separators=(",", ":"))
        for st in sorted(tmp.glob("*.safetensors")):
            add_safetensors_metadata(st, {METADATA_KEY: compact})
        if tok is not None:
            tok.save_pretrained(str(tmp))
        if card:
            from .card import model_card

            from .st_stack import MODULES_FILE, source_folder

            model_card(records, untie=state.get("untie"), model=model, base_folder=source_folder(model),
                       sentence_transformers=(tmp / MODULES_FILE).is_file()).save(str(tmp / "README.md"))

    return write_atomically(directory, fill, overwrite=overwrite)


def read_steering(directory: str | os.PathLike) -> tuple[list[SteeringRecord], dict | None, dict[str, torch.Tensor]]:
    """(records, untie info, original weights) of a checkpoint written by :func:`save_steered`."""
    from safetensors.torch import load_file

    d = Path(directory)
    side = d / SIDE_DIR
    if not (side / RECORD_FILE).is_file():
        raise CheckpointError(f"{d} is not a steered checkpoint: {SIDE_DIR}/{RECORD_FILE} is missing "
                              "(it was not written by steerformer's save_steered).")
    payload = json.loads((side / RECORD_FILE).read_text())
    if not (side / ORIGINAL_FILE).is_file():
        raise CheckpointError(f"{d}/{SIDE_DIR}/{ORIGINAL_FILE} is missing: the original weights cannot be restored.")
    return ([SteeringRecord.from_dict(r) for r in payload["records"]], payload.get("untie"),
            load_file(str(side / ORIGINAL_FILE)))


def load_for_steering(path: str | os.PathLike, *, dtype: torch.dtype | None = None):
    """Load a checkpoint with its own head class (``config.architectures``), eager attention."""
    import transformers

    from ..loading import _load_config, load_model, resolve_checkpoint

    resolved, _, _ = resolve_checkpoint(str(path))
    config = _load_config(resolved)
    arch = (getattr(config, "architectures", None) or ["AutoModel"])[0]
    auto = arch if hasattr(transformers, arch) else "AutoModel"
    return load_model(resolved, auto_class=auto, dtype=dtype)


def unsteer_checkpoint(directory: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """From a saved steered checkpoint alone, write the original model (bit-identical weights) to ``out``."""

    records, untie, originals = read_steering(directory)
    model = load_for_steering(directory)
    base = model.base_model
    with torch.no_grad():
        for name, t in originals.items():
            p = base.get_parameter(name)
            if p.shape != t.shape:
                raise CheckpointError(f"{directory}: original {name} has shape {tuple(t.shape)} but the model's is "
                                      f"{tuple(p.shape)}")
            p.copy_(t)
    for r in records[:1]:
        if tensor_sha256(base.get_parameter(r.module)) != r.original_sha256:
            raise CheckpointError(f"{directory}: the restored {r.module} does not match the recorded original hash")
    if untie:
        retie(model, untie)
    tok = load_tokenizer(model)

    def fill(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        if tok is not None:
            tok.save_pretrained(str(tmp))

    return write_atomically(out, fill, overwrite=overwrite)


def verify_checkpoint(directory: str | os.PathLike, *, tol: float = 1e-3) -> dict:
    """Check a saved steered checkpoint: hashes of the edited and original weights and of the
    direction, and the real-model alignment recomputed on the held-out prompts vs the record.
    Returns {"ok": bool, "checks": [{"name", "ok", "detail"}]}."""
    from ..adapters import get_adapter
    from .direction import vector_hash
    from .measure import model_probe
    from .prompts import encode

    records, _, originals = read_steering(directory)
    model = load_for_steering(directory)
    base = model.base_model
    checks = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "ok": bool(ok), "detail": detail})

    last = records[-1]
    got = tensor_sha256(base.get_parameter(last.module))
    check("steered weight hash", got == last.steered_sha256, f"{last.module}: {got[:12]} vs recorded {last.steered_sha256[:12]}")
    first = records[0]
    got = tensor_sha256(originals[first.module])
    check("original weight hash", got == first.original_sha256, f"{got[:12]} vs recorded {first.original_sha256[:12]}")
    for r in records:
        u = torch.tensor(r.direction, dtype=torch.float64)
        w = torch.tensor(r.left, dtype=torch.float64)
        check("direction hash", vector_hash(u) == r.direction_sha256 and vector_hash(w) == r.left_sha256,
              f"layer {r.layer}")
    if last.alignment_model_after is not None and last.custom_heldout_ids:
        check("real-model alignment", True, "not recomputed: the held-out prompts were token ids, not recorded")
    elif last.alignment_model_after is not None:
        adapter = get_adapter(model.config)
        tok = load_tokenizer(model)
        held = encode(model, last.heldout_prompts, tok, held_out=True)
        probe = model_probe(model, adapter, last.layer, held)
        target = torch.tensor(last.target, dtype=torch.float64)
        from .measure import mean_abs_cos

        a = float(mean_abs_cos(probe.final_before, target, probe.mask))
        check("real-model alignment", abs(a - last.alignment_model_after) <= tol,
              f"recomputed {a:.4f} vs recorded {last.alignment_model_after:.4f} (held-out prompts)")
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "records": len(records)}
