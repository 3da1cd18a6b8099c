"""Checking a saved steered checkpoint against its own provenance: :func:`verify_checkpoint`."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..adapters import get_adapter
from ..errors import SteerformerError
from ..loading import load_tokenizer
from .chain import Steering, replay
from .checkpoint import (
    auto_class, check_modules, check_originals, integrity_checks, load_originals, load_plain, named_originals,
    read_payload, records_of,
)
from .common import RECORD_FILE, SIDE_DIR, vector_hash
from .measure import encode, mean_abs_cos, model_probe
from .registry import method_of


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
    checks = integrity_checks(d, payload)

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "ok": bool(ok), "detail": detail})

    # The originals.
    problems = check_originals(records, originals, d)
    for p in problems:
        check("original weights", False, p.split(": ", 1)[1])
    if not problems:
        check("original weights", True, f"{len(originals)} original tensor(s) named by the records, hashes match")
    for i, r in enumerate(records):
        check("direction hash", vector_hash(torch.tensor(r.direction, dtype=torch.float64)) == r.direction_sha256,
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
        for i, r in enumerate(records):  # an ablation record holds one edit per layer: only one-edit records
            if len(r.edits) == 1 and (r.edit.gain, r.edit.layer, r.edit.module) != (r.gain, r.layer, r.module):
                check("record vs edit", False, f"records[{i}]: gain/layer/module differ from its edit")
    last = records[-1]
    if last.alignment_model_after is not None and last.custom_heldout_ids:
        check("real-model alignment", True, "not recomputed: the held-out prompts were token ids, not recorded")
    elif last.alignment_model_after is not None:
        adapter = get_adapter(model.config)
        held = encode(model, last.heldout_prompts, load_tokenizer(model), held_out=True)
        probe = model_probe(model, adapter, last.layer, held)
        target = torch.tensor(method_of(last).alignment_target(last), dtype=torch.float64)
        a = float(mean_abs_cos(probe.final_before, target, probe.mask))
        check("real-model alignment", abs(a - last.alignment_model_after) <= tol,
              f"recomputed {a:.4f} vs recorded {last.alignment_model_after:.4f} (held-out prompts)")
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "records": len(records)}
