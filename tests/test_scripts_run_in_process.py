"""The benchmark and example scripts run inside a test worker (``tests/in_process.py``), many in one
process one after another (pytest-xdist hands a free worker the next test): whatever one script does to
the process — its command line, ``sys.path``, working folder, environment, torch's threads, default
dtype and gradient mode, the modules of its own folder — is undone when it ends, whether it returns,
exits or raises, so the next script finds the worker as the first one did."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from tests.in_process import run_script, run_script_result

CHANGES_EVERYTHING_THEN_RAISES = """
import os, sys, torch
sys.argv.append("--more")
sys.path.insert(0, "/nowhere")
os.chdir(os.path.dirname(os.path.abspath(__file__)))
os.environ["STEERFORMER_CACHE"] = "/tmp/someone-elses-cache"
os.environ.pop("HF_HUB_OFFLINE", None)
torch.set_num_threads(3)
torch.set_default_dtype(torch.float64)
torch.set_grad_enabled(False)
import helper_of_a_script
raise RuntimeError("the script failed half way")
"""


def snapshot() -> dict:
    return {"argv": sys.argv[:], "path": sys.path[:], "cwd": os.getcwd(), "env": dict(os.environ),
            "threads": torch.get_num_threads(), "dtype": torch.get_default_dtype(), "grad": torch.is_grad_enabled(),
            "modules": set(sys.modules)}


def test_a_script_that_raises_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    (tmp_path / "helper_of_a_script.py").write_text("VALUE = 1\n")
    script = tmp_path / "fails.py"
    script.write_text(CHANGES_EVERYTHING_THEN_RAISES)
    before = snapshot()
    with pytest.raises(RuntimeError, match="half way"):
        run_script(script)
    after = snapshot()
    for what in ("argv", "path", "cwd", "env", "threads", "dtype", "grad"):
        assert after[what] == before[what], what
    assert "helper_of_a_script" not in sys.modules and after["modules"] <= before["modules"] | set(sys.modules)


def test_two_scripts_with_a_module_of_the_same_name_each_import_their_own(tmp_path: Path) -> None:
    """benchmarks/ratings/ has a data.py; a script of another folder with its own data.py, run after it in
    the same worker, used to get the first one's (``import data`` found it in sys.modules)."""
    for name in ("first", "second"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data.py").write_text(f"WHO = {name!r}\n")
        (folder / "main.py").write_text("import data\nprint(data.WHO)\n")
    loaded = sys.modules.get("data")  # another test's import (tests/benchmarks import benchmarks/ratings' data)
    assert run_script(tmp_path / "first" / "main.py").strip() == "first"
    assert run_script(tmp_path / "second" / "main.py").strip() == "second"
    assert sys.modules.get("data") is loaded  # set aside while the scripts ran, and back


def test_a_module_another_test_imported_under_a_scripts_module_name_is_set_aside(tmp_path: Path, monkeypatch) -> None:
    import types

    elsewhere = types.ModuleType("data")
    elsewhere.__file__ = str(tmp_path / "elsewhere" / "data.py")
    monkeypatch.setitem(sys.modules, "data", elsewhere)
    (tmp_path / "script").mkdir()
    (tmp_path / "script" / "data.py").write_text("WHO = 'the script'\n")
    (tmp_path / "script" / "main.py").write_text("import data\nprint(data.WHO)\n")
    assert run_script(tmp_path / "script" / "main.py").strip() == "the script"
    assert sys.modules["data"] is elsewhere


def test_a_folder_a_script_puts_on_sys_path_takes_its_modules_along(tmp_path: Path) -> None:
    """As benchmarks/ratings/collect.py does (``sys.path[:0] = [HERE, ...]``, then ``import data``)."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "shared_by_a_script.py").write_text("X = 1\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text(
        f"import sys\nsys.path[:0] = [{str(tmp_path / 'lib')!r}]\nimport shared_by_a_script\n"
        "raise SystemExit('refused: one line')\n")
    res = run_script_result(tmp_path / "app" / "main.py")
    assert (res.returncode, res.stderr.strip()) == (1, "refused: one line")
    assert "shared_by_a_script" not in sys.modules and str(tmp_path / "lib") not in sys.path


def test_modules_a_script_imports_from_installed_packages_stay_loaded(tmp_path: Path) -> None:
    """Only the script's own modules go: a package it imported for the first time (from site-packages or
    the checkout) stays, so torch, transformers and steerformer are never imported twice in a worker."""
    sys.modules.pop("colorsys", None)
    script = tmp_path / "uses_stdlib.py"
    script.write_text("import colorsys\nimport steerformer.steering.probe\nprint('ok')\n")
    assert run_script(script).strip() == "ok"
    assert "colorsys" in sys.modules and "steerformer.steering.probe" in sys.modules
