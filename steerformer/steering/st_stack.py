"""Keeping a sentence-transformers module stack when a steered model is saved.

A sentence-transformers checkpoint is a transformers checkpoint in the folder's root (module 0,
``Transformer``) plus ``modules.json`` naming the modules that follow it (``1_Pooling``,
``2_Normalize``, Dense layers...) and two config files. ``save_pretrained`` of the inner
transformers model writes only the root, so ``SentenceTransformer(saved)`` would rebuild a default
``[Transformer, Pooling]`` stack — without ``Normalize``, with other embeddings. Two cases:

- ``save_steered(st_model, dir)`` with the ``SentenceTransformer`` itself: ``st_model.save`` writes
  the whole stack, then steerformer adds its provenance;
- ``save_steered(bert, dir)`` where ``bert`` was loaded from a sentence-transformers folder (the
  CLI, ``load_for_steering("minilm")``): the stack files are copied byte for byte from that folder.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODULES_FILE = "modules.json"
CONFIG_FILES = ("sentence_bert_config.json", "config_sentence_transformers.json")


def as_sentence_transformer(obj: Any):
    """``obj`` when it is a ``SentenceTransformer`` (never imports the package), else None."""
    st = sys.modules.get("sentence_transformers")
    cls = getattr(st, "SentenceTransformer", None) if st is not None else None
    return obj if cls is not None and isinstance(obj, cls) else None


def inner_model(st_model) -> Any:
    """The transformers model of module 0 (where ``steer`` edits and keeps its state)."""
    first = st_model[0]
    model = getattr(first, "auto_model", None)
    if model is None:
        from ..errors import bad_argument

        raise bad_argument("model", type(first).__name__, "a SentenceTransformer whose first module is a Transformer")
    return model


def source_folder(model: Any) -> Path | None:
    """The local folder ``model`` was loaded from (config ``_name_or_path``), if it still exists."""
    from ..errors import SteerformerError
    from ..loading import resolve_checkpoint

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
