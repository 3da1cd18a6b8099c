"""docs/architecture.md names only what exists: every file or folder it quotes (`loading.py`,
`steering/chain.py`, `cli/_common.py`, `tests/models.py`), every dotted name (`ode.integrate.SOLVERS`)
and every `file.py:NAME`."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "steerformer"


def _quoted() -> list[str]:
    return re.findall(r"`([^`\s]+)`", DOC.read_text(encoding="utf-8"))


def _path(name: str) -> Path | None:
    for base in (PACKAGE, ROOT):
        if (base / name).exists():
            return base / name
    return None


def test_every_quoted_file_and_folder_exists() -> None:
    names = [q for q in _quoted() if re.fullmatch(r"[\w./-]+(\.py|\.md|/)(:\w+)?", q)]
    assert len(names) > 40  # the page really names its modules
    missing = []
    for q in names:
        name, _, attr = q.partition(":")
        path = _path(name)
        if path is None:
            missing.append(q)
        elif attr and not re.search(rf"^{attr}\b", path.read_text(encoding="utf-8"), re.M):
            missing.append(q)
    assert not missing, missing


def test_every_module_of_steering_is_on_the_page() -> None:
    quoted = set(_quoted())
    modules = {f"steering/{p.relative_to(PACKAGE / 'steering').as_posix()}"  # steering/methods/*.py too
               for p in (PACKAGE / "steering").rglob("*.py") if p.name != "__init__.py"}
    assert not modules - quoted, sorted(modules - quoted)
    assert not {q for q in quoted if q.startswith("steering/") and q.endswith(".py")} - modules


def test_every_dotted_name_resolves() -> None:
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | {p.stem for p in PACKAGE.glob("*.py")}
    dotted = [q for q in _quoted() if re.fullmatch(r"[a-z_]+(\.[A-Za-z_]+)+", q) and q.split(".")[0] in subpackages
              and not q.endswith((".py", ".md"))]
    assert dotted  # ode.integrate.SOLVERS, outputs.write_atomically, ...
    for q in dotted:
        parts = q.split(".")
        for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module("steerformer." + ".".join(parts[:i]))
            except ModuleNotFoundError:
                continue
            for attr in parts[i:]:
                assert hasattr(obj, attr), q
                obj = getattr(obj, attr)
            break
        else:
            raise AssertionError(q)


def test_every_top_level_module_and_subpackage_is_on_the_page() -> None:
    """A new module or subpackage gets its line on the page."""
    text = DOC.read_text(encoding="utf-8")
    units = [f"{p.name}" for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py",)]
    units += [f"{p.parent.name}/" for p in PACKAGE.glob("*/__init__.py")]
    missing = [u for u in units if f"`{u}`" not in text and f"`steerformer/{u}`" not in text]
    assert not missing, missing


def _module_files() -> list[str]:
    """Every module file as the page names it: ``loading.py``, ``stats/null.py``,
    ``steering/methods/<name>.py``, ``cli/steer.py`` (package ``__init__.py`` files are their folder)."""
    files = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    files += [f"cli/{p.name}" for p in (ROOT / "cli").glob("*.py") if p.name != "__init__.py"]
    return sorted(files)


def test_every_module_of_every_subpackage_and_the_cli_is_on_the_page() -> None:
    """A new module anywhere (``steerformer/**``, ``cli/``) gets its line on the page."""
    quoted = set(_quoted())
    files = _module_files()
    assert len(files) > 80 and "cli/app.py" in files and "stats/null.py" in files  # the walk sees them all
    missing = [f for f in files if f not in quoted and f"steerformer/{f}" not in quoted]
    assert not missing, missing


def _layer_table() -> dict[str, set[str]]:
    """The page's layer table: bold layer name -> the modules of its "modules" cell (``loading.py`` ->
    ``loading``, ``steerformer/stats/`` -> ``stats``)."""
    rows = re.findall(r"^\| \*\*(\w+)\*\* \| ([^|]+) \|", DOC.read_text(encoding="utf-8"), re.M)
    return {name: {re.sub(r"^steerformer/|\.py$|/$", "", m) for m in re.findall(r"`([^`]+)`", cell)}
            for name, cell in rows}


def test_the_layer_table_is_the_one_the_import_test_enforces() -> None:
    from tests.test_package_layout import LAYERS

    table = _layer_table()
    assert list(table)[:len(LAYERS)] == list(LAYERS) and list(table)[len(LAYERS):] == ["CLI"]
    for layer, units in LAYERS.items():
        assert table[layer] == set(units), (layer, sorted(table[layer] ^ set(units)))


def test_the_steering_table_is_bottom_up() -> None:
    """The steering table lists a module after every steering module it imports (its words say so)."""
    from tests.test_package_layout import _imports, _modules

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## steering/ by responsibility"):text.index("## Rules")]
    rows = re.findall(r"^\| `steering/([\w/.]+)` \|", section, re.M)
    order = ["steerformer.steering." + r.removesuffix(".py").removesuffix("/").replace("/", ".") for r in rows]
    assert len(order) > 20 and len(set(order)) == len(order)
    place = {m: i for i, m in enumerate(order)}
    later = sorted({f"{m} imports {t}, listed below it" for m, t, _, _ in _imports(_modules())
                    if m in place and t in place and place[t] > place[m]})
    assert not later, later
