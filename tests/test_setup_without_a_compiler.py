"""README's set-up needs no compiler: the installs of scripts/demo.sh (scripts/ensure_torch.sh, then
scripts/install.sh minilm,smol) succeed in a fresh virtual environment where CC and CXX are
``false`` (any C/C++ build fails at once), and the demo's two models are then found.

It installs packages (network or a wheel cache, minutes): it runs only with
STEERFORMER_TEST_SETUP=1, e.g. ``STEERFORMER_TEST_SETUP=1 python -m pytest tests/test_setup_without_a_compiler.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.environ.get("STEERFORMER_TEST_SETUP") != "1",
                                reason="installs packages into a fresh venv: set STEERFORMER_TEST_SETUP=1")


def test_demo_installs_succeed_with_no_compiler_in_a_fresh_venv(tmp_path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)  # not --system-site-packages
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
           "CC": "false", "CXX": "false", "CMAKE_C_COMPILER": "false", "CMAKE_CXX_COMPILER": "false"}
    env.pop("PYTHONPATH", None)
    for step in (["bash", "scripts/ensure_torch.sh"], ["bash", "scripts/install.sh", "minilm,smol"]):
        res = subprocess.run(step, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
        assert res.returncode == 0, (step, res.stdout[-3000:], res.stderr[-3000:])
        assert "[setup]" in res.stdout
    probe = ("import importlib.util as u, steerformer.loading as L; "
             "assert u.find_spec('llama_cpp') is None, 'llama-cpp-python was installed'; "
             "print(L.bundled_minilm_path(), L.bundled_smollm2_path())")
    res = subprocess.run([str(venv / "bin" / "python"), "-c", probe], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    minilm, smollm2 = res.stdout.split()
    assert minilm != "None" and smollm2.endswith(".gguf")
