"""Every test file a page points at exists (docs/adding-a-family.md once pointed at
tests/family_models.py, merged into tests/models.py long before)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # not CHANGELOG.md: history names old files


def test_every_test_file_a_page_names_exists() -> None:
    named = {(page.name, m) for page in PAGES for m in re.findall(r"\btests/[\w/]+\.py\b", page.read_text("utf-8"))}
    assert len(named) > 10  # the pages do point at tests
    missing = sorted(f"{page}: {path}" for page, path in named if not (ROOT / path).is_file())
    assert not missing, missing
