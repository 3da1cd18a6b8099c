"""Checking a saved steered checkpoint against its own provenance: :func:`verify_checkpoint`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..adapters import get_adapter
from ..errors import CheckpointError, SteerformerError
from ..loading import load_tokenizer
from ..results import parse_json
from .chain import Steering, replay
from .checkpoint import (
    auto_class, check_modules, check_originals, load_originals, load_plain, named_originals, read_payload, records_of,
)
from .common import (
    METADATA_KEY, RECORD_FILE, SIDE_DIR, file_hashes, model_files, payload_sha256, read_safetensors_metadata,
    safetensors_hashes, tensor_specs, vector_hash,
)
from .measure import encode, mean_abs_cos, model_probe


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
    d = Path(directory)
    payload = read_payload(d)
    records = records_of(payload, d / SIDE_DIR / RECORD_FILE)
    originals = load_originals(d)
    files = model_files(d)
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
    check("record hash", rec_hash is not None and rec_hash == payload_sha256(payload),
          "record.json matches its record_sha256" if rec_hash == payload_sha256(payload) else
          "record.json was changed after saving (record_sha256 differs)" if rec_hash else "no record_sha256 recorded")
    for fname, meta in metas.items():
        if meta is None:
            check("metadata copy", False, f"{fname}: no '{METADATA_KEY}' metadata")
            continue
        try:
            diff = _diff_fields(parse_json(meta, f"{fname} metadata"), payload)
        except ValueError:  # not JSON, or nested past any record's depth
            diff = ["(metadata is not JSON)"]
        check("metadata copy", not diff, f"{fname}: identical to record.json" if not diff else
              f"{fname}: differs from record.json in {', '.join(diff[:8])}{' ...' if len(diff) > 8 else ''}")
    # Every saved tensor.
    recorded = payload.get("tensors")
    if not isinstance(recorded, dict):
        check("tensor hashes", False, "no per-tensor sha256 recorded")
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
            got.update(tensor_specs(st))
        bad = sorted(k for k in set(specs) | set(got) if specs.get(k) != (list(got[k]) if k in got else None))
        for k in bad:
            check("tensor dtype/shape", False, f"{k}: header says {got.get(k)}, record says {specs.get(k)}")
    # Every other file (config, tokenizer, card).
    rec_files = payload.get("files")
    if not isinstance(rec_files, dict):
        check("file hashes", False, "no file sha256 recorded")
    else:
        now = file_hashes(d)
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
        model = load_plain(d, auto_class(d))
    except SteerformerError as exc:
        if any(not c["ok"] for c in checks):  # explained by a mismatch already named: report, exit 1
            check("model loads", False, str(exc))
            return {"ok": False, "checks": checks, "records": len(records)}
        raise
    check_modules(model, named_originals(records), d)  # a module the model does not have: broken provenance
    if problems:
        check("edits recomputed", False, "not recomputed: the originals do not match the records")
    else:
        check_modules(model, originals, d)
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
