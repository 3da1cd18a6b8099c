"""The model card of a steered checkpoint, from the template ``model_cards/steered.md`` through
huggingface_hub's ``ModelCard`` (YAML metadata: base_model, tags, library)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..loading import name_looks_like_path
from .record import SteeringRecord

# steerformer/model_cards links to the repository's model_cards/ folder, so the template is both
# where the project layout puts it and package data of the installed wheel.
TEMPLATE = Path(__file__).resolve().parents[1] / "model_cards" / "steered.md"


def _fmt(x, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _looks_like_hub_id(name: str) -> bool:
    # base_model metadata wants a namespaced repo id ("org/name"), never a local path.
    return bool(name) and not name_looks_like_path(name) and name.count("/") == 1


def model_card(records: Sequence[SteeringRecord], *, untie: dict | None = None):
    from huggingface_hub import ModelCard, ModelCardData

    first = records[0]
    data = ModelCardData(
        base_model=first.model_id if _looks_like_hub_id(first.model_id) else None,
        library_name="transformers",
        tags=["steerformer", "steering", "rank-1-edit", first.model_type],
    )
    rows = []
    for r in records:
        d = r.to_dict()
        src = {k: v for k, v in r.direction_source.items() if k != "kind"}
        d["direction_source_text"] = ", ".join(f"{k}={v}" for k, v in src.items())
        d["fmt"] = {
            "model_before": _fmt(r.alignment_model_before), "model_after": _fmt(r.alignment_model_after),
            "dyn_before": _fmt(r.alignment_dynamics_before), "dyn_after": _fmt(r.alignment_dynamics_after),
            "kl": _fmt(r.kl, ".4g"),
            "l1_before": _fmt(r.spectrum_before["lambda1"][0], ".4g") if r.spectrum_before else "n/a",
            "l1_after": _fmt(r.spectrum_after["lambda1"][0], ".4g") if r.spectrum_after else "n/a",
        }
        rows.append(d)
    return ModelCard.from_template(
        data, template_path=str(TEMPLATE), title=f"{first.model_id} (steered)", base_model_name=first.model_id,
        records=rows,
    )
