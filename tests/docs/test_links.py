"""The README and docs/*.md: every link goes somewhere (file and heading), the math is cited as
docs/math.md (users have no MATH.md) and every section the code cites exists there, the README
stays short, and the families table is the one `steerformer models --markdown` prints."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "scripts" / "gen_api_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def _anchors(page: Path) -> set[str]:
    slug = _generator().slug
    return {slug(line.lstrip("#")) for line in _prose(page.read_text()) if re.match(r"#{1,6} ", line)}


def _links(page: Path) -> list[str]:
    return [m.group(1) for line in _prose(page.read_text()) for m in LINK.finditer(line)]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_target_exists(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"[a-z]+://|mailto:", target):
            continue  # the network is not ours to test
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_link_checker_sees_a_broken_link(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nope) [gone](missing.md)\n```\n[code](skipped.md)\n```\n")
    assert _links(page) == ["#title", "#nope", "missing.md"]
    assert _anchors(page) == {"title"}


def test_no_markdown_file_cites_math_md() -> None:
    pages = [p for p in ROOT.rglob("*.md") if not any(part.startswith(".") or part in ("runs", "node_modules")
                                                     for part in p.relative_to(ROOT).parts)]
    assert ROOT / "README.md" in pages and ROOT / "docs" / "math.md" in pages
    citing = [str(p.relative_to(ROOT)) for p in pages if "MATH.md" in p.read_text()]
    assert citing == []


def test_every_section_the_code_cites_is_in_docs_math() -> None:
    """Code comments say "docs/math.md §N"; each N must be a section of docs/math.md (the API
    reference turns those citations into links to it)."""
    cited = set()
    for folder in ("steerformer", "cli"):
        for f in (ROOT / folder).rglob("*.py"):
            cited |= {m.group(1) for m in re.finditer(r"(?:docs/math|MATH)\.md §(\d+[a-z]?)", f.read_text())}
    sections = _generator().math_sections()
    assert {"1", "1b", "2", "3", "4", "4b", "4c", "5", "5b", "5c", "5d", "5e", "6", "7", "8"} <= set(sections)
    assert cited and cited <= set(sections), sorted(cited - set(sections))


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert command in text
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_families_page_holds_the_table_that_steerformer_models_prints() -> None:
    from steerformer.adapters.catalog import markdown_table, supported_families

    assert markdown_table(supported_families()) in (ROOT / "docs" / "families.md").read_text()
