"""Every public name has a docstring; the API reference is generated from them (scripts/gen_api_docs.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "scripts" / "gen_api_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_public_name_has_a_docstring() -> None:
    gen = _generator()
    assert gen.public_names("steerformer"), "no public names found"
    missing = gen.undocumented()
    assert missing == [], f"public names without a docstring (or a '#:' comment for constants): {missing}"


def test_reference_renders_every_public_name() -> None:
    gen = _generator()
    text = gen.render()
    for package in gen.PACKAGES:
        for name in gen.public_names(package):
            assert f"### `{package}.{name}" in text
    assert "(undocumented)" not in text
