"""docs/statistics.md's Python snippets name things that exist: every import works and every
dotted ``steerformer.…`` name resolves (the snippets are not run: they analyze whole models)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_snippet_imports_and_dotted_names_resolve() -> None:
    blocks = _python_blocks()
    assert blocks
    code = "\n".join(blocks)
    for mod, names in re.findall(r"^from (steerformer[\w.]*) import ([\w, ]+)", code, flags=re.M):
        m = importlib.import_module(mod)
        for name in names.split(","):
            assert hasattr(m, name.strip()), f"from {mod} import {name.strip()}"
    import steerformer

    for chain in re.findall(r"\bsteerformer((?:\.\w+)+)\(", code):
        obj = steerformer
        for part in chain.strip(".").split("."):
            assert hasattr(obj, part), f"steerformer{chain} ({part} missing)"
            obj = getattr(obj, part)
        assert callable(obj), chain
