"""Generate docs/api.md, the API reference, from the docstrings of the public names.

Public names are ``steerformer.__all__`` and the ``__all__`` of each subpackage listed in
:data:`PACKAGES`. Run from the repository root:

    python scripts/gen_api_docs.py            # (re)write docs/api.md
    python scripts/gen_api_docs.py --check    # exit 1 when docs/api.md is out of date

tests/docs/test_api_reference.py fails when a public name has no docstring (and when docs/api.md is stale).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"
#: The math the docstrings cite as "docs/math.md §N"; the reference links each to that section.
MATH = ROOT / "docs" / "math.md"
#: The packages whose ``__all__`` is public API, in the order of the reference.
PACKAGES = ("steerformer", "steerformer.adapters", "steerformer.stats", "steerformer.steering",
            "steerformer.collapse", "steerformer.ode", "steerformer.results", "steerformer.formats",
            "steerformer.report")


def public_names(package: str) -> list[str]:
    """``package.__all__`` without dunders and without submodules (documented as packages)."""
    mod = importlib.import_module(package)
    names = []
    for name in getattr(mod, "__all__", []):
        if name.startswith("__"):
            continue
        if inspect.ismodule(getattr(mod, name)):
            continue
        names.append(name)
    return sorted(names, key=str.lower)


def doc_of(obj: object) -> str | None:
    """The object's own docstring (an instance of a plain type such as dict has none of its own)."""
    if inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj):
        return inspect.getdoc(obj)
    return None  # constants: documented by a ``#:`` comment where defined, not by their type's docstring


def _constant_doc(package: str, name: str) -> str | None:
    """The ``#:`` comment line(s) just above ``NAME =`` in the module that defines a constant."""
    mod = importlib.import_module(package)
    value = getattr(mod, name)
    candidates = [mod] + [m for m in list(sys.modules.values())  # a constant re-exported from another module
                          if getattr(m, "__name__", "").startswith(("steerformer.", package + "."))
                          and getattr(m, name, None) is value]
    for m in candidates:
        try:
            lines = inspect.getsource(m).splitlines()
        except (OSError, TypeError):
            continue
        for i, line in enumerate(lines):
            if line.startswith(f"{name}:") or line.startswith(f"{name} ="):
                j, comment = i - 1, []
                while j >= 0 and lines[j].startswith("#:"):
                    comment.insert(0, lines[j][2:].strip())
                    j -= 1
                if comment:
                    return " ".join(comment)
    return None


def documentation(package: str, name: str) -> str | None:
    obj = getattr(importlib.import_module(package), name)
    return doc_of(obj) if (inspect.isclass(obj) or inspect.isroutine(obj)) else _constant_doc(package, name)


def undocumented() -> list[str]:
    """Every public ``package.name`` without a docstring (or ``#:`` comment, for constants)."""
    return [f"{p}.{n}" for p in PACKAGES for n in public_names(p) if not documentation(p, n)]


def _signature(obj: object) -> str:
    try:
        # default values that are functions print their address: drop it, so the page is reproducible
        return re.sub(r" at 0x[0-9a-f]+>", ">", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return ""


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def math_sections() -> dict[str, str]:
    """Section number of docs/math.md ("1", "1b", "4c" ...) → the anchor of its heading."""
    sections = {}
    for line in MATH.read_text().splitlines():
        m = re.match(r"## (\d+[a-z]?)\. ", line)
        if m:
            sections[m.group(1)] = slug(line[3:])
    return sections


def cite_math(text: str) -> str:
    """Rewrite the docstrings' "docs/math.md §N" as a link to section N of docs/math.md (the older
    "MATH.md §N", the planning file's name, is read the same way)."""
    sections = math_sections()

    def link(m: re.Match) -> str:
        anchor = sections.get(m.group(2))
        return f"[docs/math.md §{m.group(1)}](math.md#{anchor})" if anchor else f"docs/math.md §{m.group(1)}"

    return re.sub(r"(?:docs/math|MATH)\.md §((\d+[a-z]?)(?:[–-]\d+[a-z]?)?)", link, text).replace("MATH.md", "docs/math.md")


def render() -> str:
    out = ["# API reference", "",
           "Generated from the docstrings by `python scripts/gen_api_docs.py`; do not edit by hand.", ""]
    for package in PACKAGES:
        mod = importlib.import_module(package)
        out += [f"## `{package}`", "", (inspect.getdoc(mod) or "").split("\n\n")[0], ""]
        for name in public_names(package):
            obj = getattr(mod, name)
            kind = "class" if inspect.isclass(obj) else "function" if inspect.isroutine(obj) else "constant"
            sig = _signature(obj) if kind != "constant" else ""
            out += [f"### `{package}.{name}{sig}`", "", f"*{kind}*", ""]
            out += [documentation(package, name) or "(undocumented)", ""]
            if inspect.isclass(obj):
                for meth, fn in sorted(vars(obj).items()):
                    fn = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
                    if meth.startswith("_") or not inspect.isfunction(fn) or not inspect.getdoc(fn):
                        continue
                    first = inspect.getdoc(fn).split("\n\n")[0].replace("\n", " ")
                    out += [f"- `{meth}{_signature(fn)}`: {first}"]
                out += [""]
    return cite_math("\n".join(out).rstrip() + "\n")


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python scripts/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
