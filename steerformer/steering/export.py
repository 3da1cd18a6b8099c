"""The forms a steered model leaves steerformer in, besides its own checkpoint: a PEFT LoRA adapter,
a sentence-transformers module stack kept around the steered transformer, and the model card.

PEFT. Every edit is ΔW = γ u a on one stored output weight. The k edits of one module stack into a
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

Sentence-transformers. A sentence-transformers checkpoint is a transformers checkpoint in the
folder's root (module 0, ``Transformer``) plus ``modules.json`` naming the modules that follow it (``1_Pooling``,
``2_Normalize``, Dense layers...) and two config files. ``save_pretrained`` of the inner
transformers model writes only the root, so ``SentenceTransformer(saved)`` would rebuild a default
``[Transformer, Pooling]`` stack — without ``Normalize``, with other embeddings. Two cases:

- ``save_steered(st_model, dir)`` with the ``SentenceTransformer`` itself: ``st_model.save`` writes
  the whole stack, then steerformer adds its provenance;
- ``save_steered(bert, dir)`` where ``bert`` was loaded from a sentence-transformers folder (the
  CLI, ``load_for_steering("minilm")``): the stack files are copied byte for byte from that folder.

Model card. From the template ``model_cards/steered.md`` through huggingface_hub's ``ModelCard``
(YAML metadata: base_model, license, pipeline_tag, tags, library).

What the card says about the base model comes from the base model itself: its Hub id (a local
folder is named by its folder name, never by an absolute path; a Hugging Face cache snapshot by the
repo id it caches), the ``license`` and ``pipeline_tag`` of the base model's own card when it has
one, else a pipeline tag derived from the model's head class with transformers' auto mappings.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import SteerformerError, bad_argument
from ..loading import name_looks_like_path, resolve_checkpoint
from ..outputs import STEERED, write_atomically
from .chain import steering_of
from .common import RECORD_FILE, SIDE_DIR
from .record import SteeringRecord

log = logging.getLogger(__name__)


# ---- the model card ------------------------------------------------------------------------------
# steerformer/model_cards links to the repository's model_cards/ folder, so the template is both
# where the project layout puts it and package data of the installed wheel.
TEMPLATE = Path(__file__).resolve().parents[1] / "model_cards" / "steered.md"

#: Head-class mapping of transformers (modeling_auto) → Hub pipeline tag, most specific first.
_PIPELINES = (
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "text-generation"),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "fill-mask"),
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "text-classification"),
    ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "token-classification"),
    ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "question-answering"),
    ("MODEL_MAPPING_NAMES", "feature-extraction"),
)
_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def _fmt(x, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _looks_like_hub_id(name: str) -> bool:
    # base_model metadata wants a namespaced repo id ("org/name"), never a local path.
    return bool(name) and not name_looks_like_path(name) and name.count("/") == 1


def public_model_id(model_id: str) -> str | None:
    """The Hub repo id of ``model_id``: itself when it is one, the cached repo for a path inside a
    Hugging Face cache (``.../models--org--name/snapshots/<sha>``), else None."""
    if _looks_like_hub_id(model_id):
        return model_id
    for part in reversed(Path(model_id).parts):
        m = re.fullmatch(r"models--([^/]+?)--([^/]+)", part)
        if m:
            return f"{m.group(1)}/{m.group(2)}"
    return None


def display_name(model_id: str) -> str:
    """A name for the title: the Hub id, else the local folder's name (never an absolute path)."""
    return public_model_id(model_id) or Path(str(model_id).rstrip("/\\")).name or str(model_id)


def edit_count_text(n: int) -> str:
    word = _NUMBERS.get(n, str(n))
    return f"{word} rank-1 edit{'s' if n != 1 else ''}"


def base_card_data(folder: Path | None) -> dict:
    """license / pipeline_tag / language of the base model's own README.md, when it has one."""
    if folder is None or not (Path(folder) / "README.md").is_file():
        return {}
    try:
        from huggingface_hub import ModelCard

        data = ModelCard.load(Path(folder) / "README.md").data
    except Exception as exc:  # a README without YAML metadata, or unreadable: nothing to copy
        log.info("no model card metadata in %s (%s)", folder, exc)
        return {}
    return {k: getattr(data, k, None) for k in ("license", "pipeline_tag", "language")
            if getattr(data, k, None) is not None}


def pipeline_tag_of(model: Any) -> str | None:
    """The pipeline tag of ``model``'s head class (config.architectures) per transformers' mappings."""
    try:
        from transformers.models.auto import modeling_auto
    except ImportError:  # pragma: no cover
        return None
    arch = (getattr(getattr(model, "config", None), "architectures", None) or [type(model).__name__])[0]
    for mapping, tag in _PIPELINES:
        if arch in set(getattr(modeling_auto, mapping, {}).values()):
            return tag
    return None


def model_card(records: Sequence[SteeringRecord], *, untie: dict | None = None, model: Any = None,
               base_folder: str | Path | None = None, sentence_transformers: bool = False):
    """The card for ``records``. ``model``: the steered model (for its pipeline tag);
    ``base_folder``: the folder the base model was loaded from (its README's license/pipeline tag);
    ``sentence_transformers``: the saved folder is a sentence-transformers model."""
    from huggingface_hub import ModelCard, ModelCardData

    first = records[0]
    base = base_card_data(Path(base_folder) if base_folder is not None else None)
    pipeline = base.get("pipeline_tag") or ("sentence-similarity" if sentence_transformers else None) \
        or (pipeline_tag_of(model) if model is not None else None)
    base_id = public_model_id(first.model_id)
    tags = ["steerformer", "steering", "rank-1-edit", first.model_type]
    if sentence_transformers:
        tags.append("sentence-transformers")
    data = ModelCardData(
        base_model=base_id,
        license=base.get("license"),
        language=base.get("language"),
        pipeline_tag=pipeline,
        library_name="sentence-transformers" if sentence_transformers else "transformers",
        tags=tags,
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
    name = display_name(first.model_id)
    return ModelCard.from_template(
        data, template_path=str(TEMPLATE), title=f"{name} (steered)", base_model_name=name,
        records=rows, edits_text=edit_count_text(len(records)),
    )


# ---- the sentence-transformers stack -------------------------------------------------------------
MODULES_FILE = "modules.json"
CONFIG_FILES = ("sentence_bert_config.json", "config_sentence_transformers.json")


def source_folder(model: Any) -> Path | None:
    """The local folder ``model`` was loaded from (config ``_name_or_path``), if it still exists."""
    name = str(getattr(model.config, "_name_or_path", "") or "")
    if not name:
        return None
    try:
        path = Path(name) if Path(name).is_dir() else resolve_checkpoint(name)[0]
    except (SteerformerError, OSError, ValueError):
        return None
    return path if path.is_dir() else None


def copy_module_stack(model: Any, target: Path) -> list[str]:
    """Copy the sentence-transformers stack of ``model``'s source folder into ``target`` (which
    holds the saved transformers root). Returns the copied names; [] when there is no stack, or
    when its module 0 is not saved in the root (then the saved folder could not host it)."""
    src = source_folder(model)
    if src is None or not (src / MODULES_FILE).is_file():
        return []
    try:
        modules = json.loads((src / MODULES_FILE).read_text())
        paths = [str(m["path"]) for m in modules]
        root_is_transformer = any(p == "" and str(m.get("type", "")).endswith("Transformer")
                                  for p, m in zip(paths, modules))
    except (ValueError, KeyError, TypeError):
        log.warning("%s/%s is unreadable: the sentence-transformers stack is not copied", src, MODULES_FILE)
        return []
    if not root_is_transformer:
        log.warning("%s keeps its Transformer module in a subfolder: the sentence-transformers stack is not copied", src)
        return []
    base = src.resolve()
    copied = []
    for name in (MODULES_FILE, *CONFIG_FILES):
        if (src / name).is_file():
            shutil.copyfile(src / name, target / name)
            copied.append(name)
    for p in paths:
        if not p:
            continue
        folder = (src / p).resolve()
        if base not in folder.parents:  # a module path must stay inside the checkpoint
            log.warning("module path %r of %s leaves the folder: not copied", p, src / MODULES_FILE)
            continue
        if folder.is_dir():
            shutil.copytree(folder, target / p, dirs_exist_ok=True)
        copied.append(p)
    return copied


# ---- PEFT LoRA adapter ---------------------------------------------------------------------------
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_FORMAT = "steerformer.peft-adapter/1"


def _full_module_names(model: Any) -> dict[int, str]:
    """id(module) -> its path inside ``model`` (the class PEFT will wrap)."""
    return {id(m): n for n, m in model.named_modules()}


def lora_tensors(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, int], bool]:
    """({PEFT key: tensor}, {module path: rank}, fan_in_fan_out) for the steered ``model``."""
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
