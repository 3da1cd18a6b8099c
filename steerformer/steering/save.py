"""Saving a steered model as a plain transformers checkpoint, and undoing/verifying it from disk.

Layout written by :func:`save_steered` (atomic: a temporary sibling folder moved into place):

    config.json, model.safetensors ...   what ``save_pretrained`` writes; ``AutoModel`` loads it
                                          (safetensors metadata key ``steerformer`` holds the records)
    tokenizer files                       when the tokenizer is known
    README.md                             model card (template ``model_cards/steered.md``)
    steerformer/record.json               the chain: every SteeringRecord (with its Edits) in order,
                                          ALBERT untie info, sha256 of every saved tensor (and its
                                          dtype/shape), of every other file and of each original,
                                          and ``record_sha256`` (of this payload)
    steerformer/original.safetensors      the TRUE original of every edited weight (bit-exact undo;
                                          steering a steered checkpoint keeps them, not its weights)

Loading a steered folder with ``steerformer.load_model`` / ``load_for_steering`` re-attaches the
chain (``attach_steering``: the originals are put in and every edit is replayed, checking each
recorded hash, ending on the loaded bytes), so ``unsteer(model)`` works after a reload.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, SteerformerError, bad_argument
from ..loading import load_tokenizer, read_safetensors_file_header
from .edits import STATE_ATTR, Steering, replay, steering_of, tensor_sha256
from .record import SteeringRecord

log = logging.getLogger(__name__)

SIDE_DIR = "steerformer"
RECORD_FILE = "record.json"
ORIGINAL_FILE = "original.safetensors"
METADATA_KEY = "steerformer"
CHAIN_FORMAT = "steerformer.chain/1"


# ---- atomic folder writes (one implementation for every command: steerformer/outputs.py) -------
from ..outputs import STEERED, UNSTEERED, write_atomically  # noqa: E402  (re-exported: callers import it from here)


# ---- safetensors metadata ----------------------------------------------------------------------
def add_safetensors_metadata(path: Path, extra: dict[str, str]) -> None:
    """Merge ``extra`` into a safetensors file's ``__metadata__`` by rewriting only its header and
    streaming the tensor bytes (no tensor is loaded: peak memory stays at one copy buffer)."""
    tensors, meta, start = read_safetensors_file_header(Path(path))
    meta.update(extra)
    raw = json.dumps({**tensors, "__metadata__": meta}, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    tmp = path.with_suffix(".tmp")
    with open(path, "rb") as f, open(tmp, "wb") as g:
        f.seek(start)
        g.write(struct.pack("<Q", len(raw)))
        g.write(raw)
        shutil.copyfileobj(f, g, 16 << 20)
    os.replace(tmp, path)


def read_safetensors_metadata(path: Path) -> dict[str, str]:
    return dict(_safetensors_header(Path(path))[0].get("__metadata__") or {})


def _safetensors_header(path: Path) -> tuple[dict, int]:
    """(header with its ``__metadata__``, offset of the data) of a safetensors file, validated
    against the file size by the one header parser (a corrupt or truncated file is a
    :class:`CheckpointError` naming it; nothing is allocated first)."""
    tensors, meta, start = read_safetensors_file_header(Path(path))
    return ({**tensors, "__metadata__": meta} if meta else tensors), start


def safetensors_hashes(path: str | os.PathLike) -> dict[str, str]:
    """sha256 of every tensor's bytes in a safetensors file, streamed (one buffer of memory). The
    same bytes :func:`~steerformer.steering.edits.tensor_sha256` hashes for the loaded tensor."""
    path = Path(path)
    header, start = _safetensors_header(path)
    out = {}
    with open(path, "rb") as f:
        for key, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                                key=lambda kv: kv[1]["data_offsets"][0]):
            b, e = info["data_offsets"]
            f.seek(start + b)
            h = hashlib.sha256()
            left = e - b
            while left:
                chunk = f.read(min(left, 16 << 20))
                if not chunk:
                    raise CheckpointError(f"{path}: truncated while reading tensor {key!r}")
                h.update(chunk)
                left -= len(chunk)
            out[key] = h.hexdigest()
    return out


def _tensor_specs(path: Path) -> dict[str, list]:
    """key -> [dtype, shape] from a safetensors header (the bytes alone do not fix the tensor)."""
    header, _ = _safetensors_header(path)
    return {k: [v.get("dtype"), v.get("shape")] for k, v in header.items() if k != "__metadata__"}


def _file_hashes(directory: Path) -> dict[str, str]:
    """sha256 of every other file of a checkpoint folder (config, tokenizer, card); the model's
    safetensors files (their tensors are hashed one by one, their header holds the record) and
    steerformer's own folder are left out."""
    out = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.is_file() and not rel.startswith(SIDE_DIR + "/") and not (p.parent == directory and p.suffix == ".safetensors"):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[rel] = h.hexdigest()
    return out


def _model_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.safetensors"))


def _payload_sha256(payload: dict) -> str:
    body = {k: v for k, v in payload.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ---- save --------------------------------------------------------------------------------------
def save_steered(model: Any, directory: str | os.PathLike, *, overwrite: bool = False, tokenizer: Any = None,
                 card: bool = True, format: str = "checkpoint") -> Path:
    """Write the steered ``model`` to ``directory`` as a plain transformers checkpoint with its
    provenance (see module doc). Refuses a non-empty ``directory`` unless ``overwrite``.
    ``format="peft"``: write only the edits, as a PEFT LoRA adapter folder (``peft_export.py``)."""
    from safetensors.torch import save_file

    from .st_stack import as_sentence_transformer, copy_module_stack, inner_model

    st_model = as_sentence_transformer(model)  # a SentenceTransformer: save its whole module stack
    if st_model is not None:
        model = inner_model(st_model)
    if format == "peft":  # the edits alone, as a LoRA adapter (MATH.md §5c)
        from .peft_export import save_peft_adapter

        return save_peft_adapter(model, directory, overwrite=overwrite, card=card)
    if format != "checkpoint":
        raise bad_argument("format", format, "'checkpoint' (the whole steered model) or 'peft' (a LoRA adapter)")
    steering = steering_of(model)
    if steering is None:
        raise bad_argument("model", type(model).__name__, "a model edited by steerformer.steering.steer",
                           "Steer it first, or save it with model.save_pretrained(...).")
    records: list[SteeringRecord] = steering.records
    tok = load_tokenizer(model, tokenizer)
    originals = {k: v.detach().contiguous().cpu() for k, v in steering.originals.items()}

    def fill(tmp: Path) -> None:
        if st_model is not None:
            st_model.save(str(tmp), create_model_card=False)
        else:
            model.save_pretrained(str(tmp))
            copy_module_stack(model, tmp)  # sentence-transformers files of the source folder, if any
        if tok is not None:
            tok.save_pretrained(str(tmp))
        if card:
            from .card import model_card

            from .st_stack import MODULES_FILE, source_folder

            model_card(records, untie=steering.untie, model=model, base_folder=source_folder(model),
                       sentence_transformers=(tmp / MODULES_FILE).is_file()).save(str(tmp / "README.md"))
        side = tmp / SIDE_DIR
        side.mkdir()
        tensors: dict[str, str] = {}
        specs: dict[str, list] = {}
        for st in _model_files(tmp):
            tensors.update(safetensors_hashes(st))
            specs.update(_tensor_specs(st))
        payload = {"format": CHAIN_FORMAT, **steering.to_dict(),
                   "originals": {k: tensor_sha256(v) for k, v in originals.items()}, "tensors": tensors,
                   "tensor_specs": specs, "files": _file_hashes(tmp)}
        payload["record_sha256"] = _payload_sha256(payload)
        (side / RECORD_FILE).write_text(json.dumps(payload, indent=1))
        save_file(originals, str(side / ORIGINAL_FILE), metadata={"format": "pt"})
        compact = json.dumps(payload, separators=(",", ":"))
        for st in _model_files(tmp):
            add_safetensors_metadata(st, {METADATA_KEY: compact})

    return write_atomically(directory, fill, overwrite=overwrite, kind=STEERED,
                            inputs=[getattr(model.config, "_name_or_path", None)])


# ---- read the chain ----------------------------------------------------------------------------
_REQUIRED = [f.name for f in dataclasses.fields(SteeringRecord)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def _read_payload(d: Path) -> dict:
    path = d / SIDE_DIR / RECORD_FILE
    if not path.is_file():
        raise CheckpointError(f"{d} is not a steered checkpoint: {SIDE_DIR}/{RECORD_FILE} is missing "
                              "(it was not written by steerformer's save_steered).")
    try:
        payload = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: broken provenance, not JSON ({exc})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
        raise CheckpointError(f"{path}: broken provenance, no 'records' list")
    if not payload["records"]:
        raise CheckpointError(f"{path}: broken provenance, 'records' is empty (no edit to undo or verify)")
    return payload


def _records(payload: dict, where: Path) -> list[SteeringRecord]:
    out = []
    for i, r in enumerate(payload["records"]):
        if not isinstance(r, dict):
            raise CheckpointError(f"{where}: broken provenance, records[{i}] is not an object")
        missing = [k for k in _REQUIRED if k not in r]
        if missing:
            raise CheckpointError(f"{where}: broken provenance, records[{i}] is missing field {missing[0]!r}")
        try:
            out.append(SteeringRecord.from_dict(r))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{where}: broken provenance, records[{i}] has a bad edit ({exc})") from None
    return out


def _named_originals(records: list[SteeringRecord]) -> dict[str, str]:
    """name -> sha256 the original must have, from the records (first edit of each weight)."""
    named: dict[str, str] = {}
    for r in records:
        if not r.edits:  # record written before edits were stored
            named.setdefault(r.module, r.original_sha256)
        for e in r.edits:
            named.setdefault(e.module, e.before_sha256)
            if e.compensate_bias and e.bias_module:
                named.setdefault(e.bias_module, e.bias_before_sha256 or "")
    return named


def _load_originals(d: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = d / SIDE_DIR / ORIGINAL_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the original weights cannot be restored.")
    _safetensors_header(path)  # truncation / corruption: one clear line
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors' own errors
        raise CheckpointError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None


def check_originals(records: list[SteeringRecord], originals: dict[str, torch.Tensor], where: Path) -> list[str]:
    """Problems with the originals (empty when they hold exactly the tensors the records name, each
    with the recorded hash)."""
    named = _named_originals(records)
    problems = [f"{where}: original.safetensors holds {k!r}, which no record names" for k in originals if k not in named]
    problems += [f"{where}: original.safetensors lacks {k!r}, named by the records" for k in named if k not in originals]
    problems += [f"{where}: original {k!r} does not match its recorded sha256 (changed or corrupt)"
                 for k, h in named.items() if k in originals and tensor_sha256(originals[k]) != h]
    return problems


def read_chain(directory: str | os.PathLike, *, check: bool = True) -> Steering:
    """The :class:`Steering` saved in ``directory`` (records with their edits, the true originals,
    untie info). ``check``: the originals must be exactly the tensors the records name, each with
    the recorded hash (else a :class:`CheckpointError` naming the tensor)."""
    d = Path(directory)
    payload = _read_payload(d)
    records = _records(payload, d / SIDE_DIR / RECORD_FILE)
    originals = _load_originals(d)
    if check:
        problems = check_originals(records, originals, d)
        if problems:
            raise CheckpointError(problems[0])
    return Steering(records=records, originals=originals, untie=payload.get("untie"))


def read_steering(directory: str | os.PathLike) -> tuple[list[SteeringRecord], dict | None, dict[str, torch.Tensor]]:
    """(records, untie info, original weights) of a checkpoint written by :func:`save_steered`."""
    s = read_chain(directory)
    return s.records, s.untie, s.originals


def attach_steering(model: Any, directory: str | os.PathLike) -> Any:
    """Re-attach the chain saved in ``directory`` to ``model`` (loaded from it): see module doc."""
    steering = read_chain(directory)
    if any(not r.edits for r in steering.records):
        # Written before edits were stored: only a full undo (copy the originals back) is possible.
        for name in steering.originals:
            _param(model, name, directory)
        setattr(model, STATE_ATTR, steering)
        return model
    for name in steering.originals:
        _param(model, name, directory)
    try:
        replay(model, steering)
    except SteerformerError as exc:
        raise CheckpointError(f"{directory}: {exc}") from None
    return model


def _param(model: Any, name: str, where) -> torch.nn.Parameter:
    try:
        return model.base_model.get_parameter(name)
    except AttributeError:
        raise CheckpointError(f"{where}: broken provenance, the records name module {name!r}, which "
                              f"{type(model).__name__} does not have") from None


def load_for_steering(path: str | os.PathLike, *, dtype: torch.dtype | None = None, device: str | None = None):
    """Load a checkpoint with its own head class (``config.architectures``), eager attention; a
    steered checkpoint comes back with its chain attached (``unsteer`` works)."""
    from ..loading import load_model, resolve_checkpoint

    resolved, _, _ = resolve_checkpoint(str(path))
    auto = _auto_class(resolved)
    if (Path(resolved) / SIDE_DIR / RECORD_FILE).is_file():
        for st in _model_files(Path(resolved)):
            _safetensors_header(st)  # a truncated model file: one line, before transformers reads it
        model = _load_plain(resolved, auto, dtype, device)
        return attach_steering(model, resolved)
    return load_model(resolved, auto_class=auto, dtype=dtype, device=device)


def _load_plain(path, auto: str, dtype, device):
    from ..loading import load_model

    try:
        return load_model(path, auto_class=auto, dtype=dtype, device=device, steering=False)
    except SteerformerError:
        raise
    except Exception as exc:  # transformers / safetensors errors on a corrupt checkpoint
        raise CheckpointError(f"{path}: cannot be loaded ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def unsteer_checkpoint(directory: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False,
                       last: int | None = None) -> Path:
    """From a saved steered checkpoint alone, write the original model (bit-identical weights) to
    ``out``; ``last=k`` removes only the last k steering calls (``out`` is then still steered).
    The originals are checked (exactly the tensors the records name, each hash) before anything
    is written."""
    from .edit import unsteer

    read_chain(directory)  # provenance + originals, before loading anything
    model = load_for_steering(directory)
    unsteer(model, last=last)
    if steering_of(model) is not None:
        return save_steered(model, out, overwrite=overwrite)
    tok = load_tokenizer(model)

    def fill(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        if tok is not None:
            tok.save_pretrained(str(tmp))

    return write_atomically(out, fill, overwrite=overwrite, kind=UNSTEERED, inputs=[directory])


def _diff_fields(a: Any, b: Any, path: str = "") -> list[str]:
    """Names of the fields where two JSON values differ (records[1].gain, tensors['h.0...'] ...)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(sub)
            else:
                out += _diff_fields(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and any(isinstance(x, (dict, list)) for x in a):
        return [x for i, (p, q) in enumerate(zip(a, b)) for x in _diff_fields(p, q, f"{path}[{i}]")]
    return [] if a == b else [path or "(root)"]


def verify_checkpoint(directory: str | os.PathLike, *, tol: float = 1e-3) -> dict:
    """Check a saved steered checkpoint, whole chain: the record's own hash and its copy in the
    safetensors metadata, the sha256 of every saved tensor, the originals (exactly the named
    tensors, each hash), every edit recomputed from the originals and the record against the saved
    weights, the direction hashes, and the real-model alignment on the held-out prompts.
    Returns {"ok": bool, "checks": [{"name", "ok", "detail"}], "records": n}; each mismatch is a
    failed check naming what differs. Broken provenance (unreadable record, truncated files) is a
    :class:`CheckpointError`."""
    from ..adapters import get_adapter
    from .direction import vector_hash
    from .measure import mean_abs_cos, model_probe
    from .prompts import encode

    d = Path(directory)
    payload = _read_payload(d)
    records = _records(payload, d / SIDE_DIR / RECORD_FILE)
    originals = _load_originals(d)
    files = _model_files(d)
    if not files:
        raise CheckpointError(f"{d}: no model .safetensors file")
    hashes: dict[str, str] = {}
    metas: dict[str, str | None] = {}
    for st in files:
        hashes.update(safetensors_hashes(st))  # validates every file against its size first
        metas[st.name] = read_safetensors_metadata(st).get(METADATA_KEY)
    checks = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "ok": bool(ok), "detail": detail})

    # The record: its own hash, and the copy in every model file's metadata.
    rec_hash = payload.get("record_sha256")
    check("record hash", rec_hash is not None and rec_hash == _payload_sha256(payload),
          "record.json matches its record_sha256" if rec_hash == _payload_sha256(payload) else
          "record.json was changed after saving (record_sha256 differs)" if rec_hash else "no record_sha256 recorded")
    for fname, meta in metas.items():
        if meta is None:
            check("metadata copy", False, f"{fname}: no '{METADATA_KEY}' metadata")
            continue
        try:
            diff = _diff_fields(json.loads(meta), payload)
        except ValueError:
            diff = ["(metadata is not JSON)"]
        check("metadata copy", not diff, f"{fname}: identical to record.json" if not diff else
              f"{fname}: differs from record.json in {', '.join(diff[:8])}{' ...' if len(diff) > 8 else ''}")
    # Every saved tensor.
    recorded = payload.get("tensors")
    if not isinstance(recorded, dict):
        check("tensor hashes", False, "no per-tensor sha256 recorded (saved by an older steerformer)")
    else:
        bad = [k for k in recorded if k in hashes and hashes[k] != recorded[k]]
        for k in bad:
            check("tensor hash", False, f"{k}: saved bytes differ from the recorded sha256")
        for k in sorted(set(recorded) - set(hashes)):
            check("tensor hash", False, f"{k}: recorded but missing from the model files")
        for k in sorted(set(hashes) - set(recorded)):
            check("tensor hash", False, f"{k}: in the model files but not in the record")
        if not bad and set(recorded) == set(hashes):
            check("tensor hashes", True, f"all {len(hashes)} tensors match")
    specs = payload.get("tensor_specs")
    if isinstance(specs, dict):
        got = {}
        for st in files:
            got.update(_tensor_specs(st))
        bad = sorted(k for k in set(specs) | set(got) if specs.get(k) != (list(got[k]) if k in got else None))
        for k in bad:
            check("tensor dtype/shape", False, f"{k}: header says {got.get(k)}, record says {specs.get(k)}")
    # Every other file (config, tokenizer, card).
    rec_files = payload.get("files")
    if not isinstance(rec_files, dict):
        check("file hashes", False, "no file sha256 recorded (saved by an older steerformer)")
    else:
        now = _file_hashes(d)
        bad = sorted(k for k in set(rec_files) | set(now) if rec_files.get(k) != now.get(k))
        for k in bad:
            what = "missing" if k not in now else "not in the record" if k not in rec_files else "changed"
            check("file hash", False, f"{k}: {what}")
        if not bad:
            check("file hashes", True, f"all {len(now)} other files match")
    # The originals.
    problems = check_originals(records, originals, d)
    for p in problems:
        check("original weights", False, p.split(": ", 1)[1])
    if not problems:
        check("original weights", True, f"{len(originals)} original tensor(s) named by the records, hashes match")
    for i, r in enumerate(records):
        u = torch.tensor(r.direction, dtype=torch.float64)
        w = torch.tensor(r.left, dtype=torch.float64)
        check("direction hash", vector_hash(u) == r.direction_sha256 and vector_hash(w) == r.left_sha256,
              f"records[{i}] (layer {r.layer})")
    # Recompute the whole chain from the originals and compare with the saved weights.
    try:
        model = _load_plain(d, _auto_class(d), None, None)
    except SteerformerError as exc:
        if any(not c["ok"] for c in checks):  # explained by a mismatch already named: report, exit 1
            check("model loads", False, str(exc))
            return {"ok": False, "checks": checks, "records": len(records)}
        raise
    for name in _named_originals(records):
        _param(model, name, d)  # a module the model does not have: broken provenance
    if problems:
        check("edits recomputed", False, "not recomputed: the originals do not match the records")
    elif any(not r.edits for r in records):
        check("edits recomputed", False, "the record does not hold the edits (saved by an older steerformer)")
    else:
        for name in originals:
            _param(model, name, d)
        try:
            replay(model, Steering(records=records, originals=originals, untie=payload.get("untie")))
            check("edits recomputed", True, f"{sum(len(r.edits) for r in records)} edit(s) replayed from the "
                                            "originals give the saved weights bit for bit")
        except SteerformerError as exc:
            check("edits recomputed", False, str(exc))
        for i, r in enumerate(records):
            for e in r.edits[:1] if len(r.edits) == 1 else []:  # an ablation record holds one edit per layer
                if e.gain != r.gain or e.layer != r.layer or e.module != r.module:
                    check("record vs edit", False, f"records[{i}]: gain/layer/module differ from its edit")
    last = records[-1]
    if last.alignment_model_after is not None and last.custom_heldout_ids:
        check("real-model alignment", True, "not recomputed: the held-out prompts were token ids, not recorded")
    elif last.alignment_model_after is not None:
        adapter = get_adapter(model.config)
        tok = load_tokenizer(model)
        held = encode(model, last.heldout_prompts, tok, held_out=True)
        probe = model_probe(model, adapter, last.layer, held)
        target = torch.tensor(last.target, dtype=torch.float64)
        a = float(mean_abs_cos(probe.final_before, target, probe.mask))
        check("real-model alignment", abs(a - last.alignment_model_after) <= tol,
              f"recomputed {a:.4f} vs recorded {last.alignment_model_after:.4f} (held-out prompts)")
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "records": len(records)}


def _auto_class(path: Path) -> str:
    import transformers

    from ..loading import _load_config

    arch = (getattr(_load_config(path), "architectures", None) or ["AutoModel"])[0]
    return arch if hasattr(transformers, arch) else "AutoModel"
