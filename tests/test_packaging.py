"""The explicit package list in pyproject.toml must name every subpackage of steerformer, and only those:
a listed package whose folder is gone (a removed method) breaks `pip install -e .` itself."""

from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "steerformer").rglob("__init__.py")
    }
    assert found - listed == set(), f"add these to [tool.setuptools] packages: {sorted(found - listed)}"
    assert listed - found - {"steerformer_cli"} == set(), (
        f"remove these from [tool.setuptools] packages, their folders are gone: {sorted(listed - found - {'steerformer_cli'})}"
    )
    assert "steerformer_cli" in listed and "cli" not in listed
