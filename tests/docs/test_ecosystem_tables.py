"""docs/ecosystem.md's vLLM table says what adapters/runtimes.py declares, family by family."""

from __future__ import annotations

import pathlib
import re

from steerformer.adapters.runtimes import VLLM_LORA

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "ecosystem.md"


def test_vllm_table_matches_the_declared_modules() -> None:
    text = DOC.read_text()
    section = text.split("| model_type | vLLM LoRA modules", 1)[1].split("\n\n", 1)[0]
    seen = set()
    for row in section.splitlines()[2:]:
        types, modules = (cell.strip() for cell in row.strip("|").split("|"))
        names = set(re.sub(r"\s*\(packed: ([^)]*)\)", r", \1", modules).replace(" ", "").split(","))
        for t in types.split(", "):
            seen.add(t)
            if modules.startswith("none"):
                assert VLLM_LORA[t].why and not VLLM_LORA[t].modules, t
            else:
                assert set(VLLM_LORA[t].modules) == names, t
    assert seen == set(VLLM_LORA)
