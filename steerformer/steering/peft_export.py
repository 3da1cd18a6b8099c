"""A steered model's edits as a PEFT LoRA adapter (MATH.md §5c): ``save_steered(model, dir,
format="peft")``.

Every edit is ΔW = γ u a on one stored output weight. The k edits of one module stack into a
rank-k LoRA, B = [γ₁u₁ … γ_k u_k] (out × k), A = [a₁; …; a_k] (k × in), so B @ A = Σ ΔW
(``Steering.factors``). Written as PEFT expects it:

    adapter_config.json        peft_type LORA, r = edits per module, lora_alpha = r (scaling 1),
                               target_modules = the edited modules, fan_in_fan_out for GPT-2's
                               Conv1D (which stores Wᵀ); modules with a different number of edits
                               get their own r/alpha through rank_pattern/alpha_pattern
    adapter_model.safetensors  base_model.model.<module>.lora_A.weight (k × in),
                               base_model.model.<module>.lora_B.weight (out × k), in the edited
                               weight's dtype; <module> is the path inside the steered model's own
                               class (e.g. ``transformer.h.11.attn.c_proj`` for GPT2LMHeadModel), so
                               load the adapter into that class
    README.md                  card: library_name peft, base_model, tag base_model:adapter:<id>
    steerformer/record.json    the steering records (provenance; the adapter needs no steerformer)

``PeftModel.from_pretrained(base, dir)`` then computes what the steered model computes, and
``merge_and_unload()`` gives the steered weights up to the rounding of B @ A in the stored dtype.
An edit that compensates its bias shift through b_O, or an untied ALBERT layer, changes more than
a LoRA can hold: refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from ..errors import bad_argument
from .card import public_model_id

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_FORMAT = "steerformer.peft-adapter/1"


def _full_module_names(model: Any) -> dict[int, str]:
    """id(module) -> its path inside ``model`` (the class PEFT will wrap)."""
    return {id(m): n for n, m in model.named_modules()}


def lora_tensors(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, int], bool]:
    """({PEFT key: tensor}, {module path: rank}, fan_in_fan_out) for the steered ``model``."""
    from .edits import steering_of

    steering = steering_of(model)
    if steering is None:
        raise bad_argument("model", type(model).__name__, "a model edited by steerformer.steering.steer",
                           "Steer it first; a LoRA adapter holds the edits.")
    if steering.untie:
        raise bad_argument("format", "peft", "a model whose layers were not untied (an adapter cannot untie "
                           "ALBERT's shared layer)", "Export the full checkpoint (format='checkpoint') instead.")
    if any(e.compensate_bias for e in steering.edits):
        raise bad_argument("format", "peft", "edits without compensate_bias (a LoRA adapter cannot change the "
                           "output bias b_O)", "Export the full checkpoint (format='checkpoint') instead.")
    base = model.base_model
    names = _full_module_names(model)
    tensors: dict[str, torch.Tensor] = {}
    ranks: dict[str, int] = {}
    transposed = {e.transposed for e in steering.edits}
    for weight_name in steering.modules():
        module_name = weight_name.rsplit(".", 1)[0]  # "...c_proj.weight" -> "...c_proj"
        full = names[id(base.get_submodule(module_name))]
        param = base.get_parameter(weight_name)
        B, A = steering.factors(weight_name)  # float64, canonical: B @ A = Σ γ u a (out × in)
        tensors[f"base_model.model.{full}.lora_A.weight"] = A.to(param.dtype).contiguous().cpu()
        tensors[f"base_model.model.{full}.lora_B.weight"] = B.to(param.dtype).contiguous().cpu()
        ranks[full] = int(A.shape[0])
    return tensors, ranks, transposed == {True}


def adapter_config(ranks: dict[str, int], fan_in_fan_out: bool, base_model: str | None) -> dict:
    """The LoRA config: scaling lora_alpha / r = 1 for every module."""
    r = max(set(ranks.values()), key=list(ranks.values()).count)  # the most common rank
    pattern = {m: k for m, k in ranks.items() if k != r}
    return {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": base_model, "revision": None,
        "inference_mode": True, "r": r, "lora_alpha": r, "lora_dropout": 0.0, "bias": "none",
        "target_modules": sorted(ranks), "fan_in_fan_out": bool(fan_in_fan_out), "init_lora_weights": True,
        "use_rslora": False, "use_dora": False, "modules_to_save": None,
        "rank_pattern": pattern, "alpha_pattern": dict(pattern),
    }


CARD = """---
{yaml}
---

# {title}

A rank-{ranks} LoRA adapter for **{base}** that reproduces {n} steering edit{s} of attention output
weights made with [steerformer](https://pypi.org/project/steerformer/): each edit
ΔW_O = γ u a is the LoRA pair lora_B = γ u, lora_A = a with scaling 1 (lora_alpha = r).

    from peft import PeftModel
    model = PeftModel.from_pretrained(base_model, "THIS_FOLDER")   # base_model: {cls}

| module | edits (rank) |
|---|---|
{rows}

The steering records (directions, gains, how each was chosen) are in `steerformer/record.json`.
"""


def save_peft_adapter(model: Any, directory: str | os.PathLike, *, overwrite: bool = False,
                      card: bool = True) -> Path:
    """Write the edits of the steered ``model`` as a PEFT LoRA adapter folder (see module doc)."""
    from huggingface_hub import ModelCardData
    from safetensors.torch import save_file

    from .edits import steering_of
    from ..outputs import STEERED
    from .save import RECORD_FILE, SIDE_DIR, write_atomically

    tensors, ranks, fan_in_fan_out = lora_tensors(model)
    steering = steering_of(model)
    records = steering.records
    base_id = public_model_id(records[0].model_id)
    config = adapter_config(ranks, fan_in_fan_out, base_id or records[0].model_id)

    def fill(tmp: Path) -> None:
        save_file(tensors, str(tmp / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2))
        side = tmp / SIDE_DIR
        side.mkdir()
        (side / RECORD_FILE).write_text(json.dumps({"format": ADAPTER_FORMAT, **steering.to_dict()}, indent=1))
        if card:
            from .card import display_name

            tags = ["steerformer", "steering", "lora", records[0].model_type]
            if base_id:
                tags.append(f"base_model:adapter:{base_id}")
            data = ModelCardData(base_model=base_id, library_name="peft", tags=tags)
            rows = "\n".join(f"| `{m}` | {k} |" for m, k in sorted(ranks.items()))
            n = len(steering.edits)
            (tmp / "README.md").write_text(CARD.format(
                yaml=data.to_yaml(), title=f"{display_name(records[0].model_id)} steering adapter",
                base=display_name(records[0].model_id), n=n, s="" if n == 1 else "s",
                ranks="/".join(str(k) for k in sorted(set(ranks.values()))), cls=type(model).__name__, rows=rows))

    # the adapter folder carries steerformer/record.json (a steer output); never the model's own folder
    return write_atomically(directory, fill, overwrite=overwrite, kind=STEERED,
                            inputs=[getattr(model.config, "_name_or_path", None)])
