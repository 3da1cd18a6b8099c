"""The shape of steering/, read from the source: the model is run in one room (steering/probe.py: one
capture, one re-run, one selection mask, one KL formula); imports never go up a floor (the floors are
docs/architecture.md's); no method folder imports another; and no shared module names a method or
compares an edit's kind or a record's method to stand for one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_package_layout import _imports, _modules

ROOT = Path(__file__).resolve().parents[2]
STEERING = ROOT / "steerformer" / "steering"
METHODS = ("paper", "addition", "ablation")
KINDS = ("steer", "add", "ablate", "lora")  # an edit's kinds (edit.py), one per method


def _floors() -> dict[str, int]:
    """steerformer.steering.<module> -> its floor (0 ground, 1 evaluation, 2 methods, 3 top), as the
    architecture page's table lists them."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## steering/ by responsibility"):text.index("## Rules")]
    floors, floor = {}, -1
    for line in section.splitlines():
        if line.startswith("| **"):
            floor += 1
            continue
        m = re.match(r"^\| `steering/([\w/.]+)` \|", line)
        if m:
            dotted = m.group(1).removesuffix(".py").removesuffix("/").replace("/", ".")
            floors["steerformer.steering." + dotted] = floor
    assert floor == 3, "the page names four floors"
    return floors


def _steering_files() -> list[Path]:
    return sorted(STEERING.rglob("*.py"))


def _is_method_folder(path: Path) -> bool:
    return "methods" in path.relative_to(STEERING).parts[:-1]


def _calls(tree: ast.AST, name: str) -> int:
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Call)
               and (getattr(n.func, "attr", None) == name or getattr(n.func, "id", None) == name))


def test_the_model_is_run_for_steering_in_one_room() -> None:
    """Hooks that read the model, re-runs of cached blocks and the KL formula are the probe room's
    (activation.py adds vectors at run time: the product, not a reading)."""
    where: dict[str, list[str]] = {}
    for path in _steering_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(STEERING).as_posix()
        text = path.read_text(encoding="utf-8")
        for what, n in (("hook", _calls(tree, "register_forward_pre_hook") + _calls(tree, "register_forward_hook")),
                        ("re-run", _calls(tree, "functional_call")),
                        ("KL formula", len(re.findall(r"\.exp\(\) \* \(", text))),
                        ("selection mask", len(re.findall(r"select\[i, len\(", text)))):
            if n:
                where.setdefault(what, []).append(rel)
    assert where == {"hook": ["activation.py", "probe.py"], "re-run": ["probe.py"], "KL formula": ["probe.py"],
                     "selection mask": ["probe.py"]}, where


def test_imports_never_go_up_a_floor_and_no_method_imports_another() -> None:
    floors = _floors()
    up, across = [], []
    for mod, target, _, line in _imports(_modules()):
        if mod in floors and target in floors and floors[target] > floors[mod]:
            up.append(f"{mod}:{line} imports {target}")
        parts, tparts = mod.split("."), target.split(".")
        if parts[2:3] == ["methods"] and tparts[2:3] == ["methods"] and len(parts) > 4 and len(tparts) > 4 \
                and parts[3] != tparts[3]:
            across.append(f"{mod}:{line} imports {target}")
    assert not up, up
    assert not across, across
    assert set(floors) >= {m for m in _modules() if m.startswith("steerformer.steering.")}


def test_no_shared_module_names_a_method_or_stands_for_one_by_a_kind() -> None:
    """Outside the method folders, no code names a built-in method (the registry's table of them and
    its one default aside), and no comparison of an edit's ``kind`` or a record's ``method`` with a
    string decides what to do (``edit.py`` owns the kinds and answers for them)."""
    found = []
    for path in _steering_files():
        rel = path.relative_to(STEERING).as_posix()
        if _is_method_folder(path) or rel == "edit.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        registry_table = set()
        if rel == "registry.py":  # BUILT_IN's keys and the default stated in choose_method are its job
            for node in ast.walk(tree):
                if isinstance(node, ast.Dict):
                    registry_table |= {id(k) for k in node.keys}
                if isinstance(node, ast.IfExp):
                    registry_table |= {id(node.body), id(node.orelse)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in METHODS and id(node) not in registry_table:
                found.append(f"{rel}:{node.lineno} names {node.value!r}")
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) \
                    and node.left.attr in ("kind", "method") \
                    and any(isinstance(c, ast.Constant) and c.value in METHODS + KINDS for c in node.comparators):
                found.append(f"{rel}:{node.lineno} compares .{node.left.attr} with a method's name or kind")
    assert not found, found
