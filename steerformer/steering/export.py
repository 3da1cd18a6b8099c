"""The forms a steered model leaves steerformer in, besides its own checkpoint and its LoRA adapter
(``lora.py``): a sentence-transformers module stack kept around the steered transformer, and the
model card.

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

import logging
from pathlib import Path
from typing import Any, Sequence

from ..errors import SteerformerError
from ..files import checked_side_file, copy_side_file, side_files
from ..loading import checkpoint_roots, display_name, public_model_id, resolve_checkpoint
from ..results import read_json
from .registry import method_of
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


def edit_count_text(n: int) -> str:
    return f"{_NUMBERS.get(n, str(n))} rank-1 edit{'s' if n != 1 else ''}"


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
    from transformers.models.auto import modeling_auto  # transformers >= 4.44 (a dependency) has it

    arch = (getattr(getattr(model, "config", None), "architectures", None) or [type(model).__name__])[0]
    return next((tag for mapping, tag in _PIPELINES if arch in set(getattr(modeling_auto, mapping, {}).values())), None)


def edit_formula(record: SteeringRecord) -> str:
    """The formula of what ``record`` changed, in the words of the method that made it
    (``Method.card_formula``; docs/math.md §2.3, §5d)."""
    return method_of(record).card_formula(record)


def edit_rows(record: SteeringRecord) -> list[tuple[str, str]]:
    """The rows of one record's table (the model card; the report page's table of the edit): what
    every record has, with its method's own rows (``Method.facts``) after the gain."""
    f = lambda x, spec=".4f": "n/a" if x is None else format(x, spec)  # noqa: E731
    src = {k: v for k, v in record.direction_source.items() if k != "kind"}
    layers = sorted({e.layer for e in record.edits})
    where = f"{layers[0]}" if len(layers) == 1 else f"{layers}"
    if len(record.layers_changed) > len(layers):
        where += f" — shared weights: layers {record.layers_changed} all changed"
    rows = [("layer (execution)", where + (" (untied from the shared group first)" if record.untied else "")),
            ("edited weight", "; ".join(f"`{m}`" for m in dict.fromkeys(e.module for e in record.edits))
             + f" ({record.dtype})"),
            ("direction", f"{record.direction_source.get('kind', '')} {', '.join(f'{k}={v}' for k, v in src.items())} "
                          f"(sha256 `{record.direction_sha256[:16]}…`)"),
            ("edit", edit_formula(record)), ("gain", method_of(record).gain_text(record)),
            *method_of(record).facts(record),
            ("alignment, real model final states (held-out prompts)",
             f"{f(record.alignment_model_before)} → {f(record.alignment_model_after)}"),
            ("weight change ‖ΔW‖/‖W‖", f"{record.weight_change:.4g}"),
            (f"KL of output distributions ({record.kl_kind})", f(record.kl, ".4g"))]
    ev = record.evaluation
    if ev:
        rows.append((f"held-out chat answers ({ev.get('n_answers')})",
                     f"concept rate {ev['concept_rate']:.2f} (base {ev['base_concept_rate']:.2f}), KL on the answers "
                     f"{ev['kl']:.3f}, distinct-2 {ev['distinct2']:.2f}, fluency {f(ev.get('fluency'), '.2f')}"))
        if ev.get("aggregate") is not None:
            rows.append((f"judged ({ev.get('judge')}; 0–2 each, AxBench's axes)",
                         f"concept {ev['judge_concept']:.2f}, relevance {ev['judge_relevance']:.2f}, fluency "
                         f"{ev['judge_fluency']:.2f}; aggregate (harmonic mean) {ev['aggregate']:.2f}; good steers "
                         f"(all three ≥ 1) {ev['good']:.2f}"))
    return rows


def record_section(record: SteeringRecord) -> dict:
    """The report page's section of ``record`` (``report/steering.py``): the table of the edit (the
    card's rows) and its method's own section (``Method.report_section``)."""
    return {"facts": [list(r) for r in edit_rows(record)], **(method_of(record).report_section(record) or {})}


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
    tags = ["steerformer", "steering", "rank-1-edit", first.model_type] + \
        (["sentence-transformers"] if sentence_transformers else [])
    data = ModelCardData(base_model=base_id, license=base.get("license"), language=base.get("language"),
                         pipeline_tag=pipeline, tags=tags,
                         library_name="sentence-transformers" if sentence_transformers else "transformers")
    rows = [{"rows": edit_rows(r)} for r in records]
    name = display_name(first.model_id)
    return ModelCard.from_template(
        data, template_path=str(TEMPLATE), title=f"{name} (steered)", base_model_name=name,
        records=rows, edits_text=edit_count_text(len(records)),
        formulas=list(dict.fromkeys(edit_formula(r) for r in records)),
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
    modules_file = checked_side_file(src, src / MODULES_FILE, checkpoint_roots(src))  # no link out, no FIFO
    try:
        modules = read_json(modules_file)
        paths = [str(m["path"]) for m in modules]
        root_is_transformer = any(p == "" and str(m.get("type", "")).endswith("Transformer")
                                  for p, m in zip(paths, modules))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("%s/%s is unreadable: the sentence-transformers stack is not copied", src, MODULES_FILE)
        return []
    if not root_is_transformer:
        log.warning("%s keeps its Transformer module in a subfolder: the sentence-transformers stack is not copied", src)
        return []
    base = src.resolve()
    roots = checkpoint_roots(src)
    copied = []
    for name in (MODULES_FILE, *CONFIG_FILES):
        if (src / name).is_file() or (src / name).is_symlink():
            copy_side_file(checked_side_file(src, src / name, roots), target / name)
            copied.append(name)
    for p in paths:
        if not p:
            continue
        folder = (src / p).resolve()
        if base not in folder.parents:  # a module path must stay inside the checkpoint
            log.warning("module path %r of %s leaves the folder: not copied", p, src / MODULES_FILE)
            continue
        if folder.is_dir():
            # every file checked before any is copied: no link out, no FIFO or device, bounded sizes
            for rel, file in side_files(src, src / p, roots):
                copy_side_file(file, target / rel)
        copied.append(p)
    return copied
