"""The README's torch sentence and the set-up scripts agree: the scripts install torch only when it
is missing, with the command the README quotes, and TORCH_INDEX_URL gives the README's CPU build."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU = "https://download.pytorch.org/whl/cpu"


def _run(tmp_path: Path, has_torch: bool, **env: str) -> list[str]:
    """Run scripts/ensure_torch.sh with a fake python3 that records every call instead of running."""
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n'
                    f'if [ "$1" = "-c" ]; then exit {0 if has_torch else 1}; fi\nexit 0\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", **env}
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure_torch.sh")], check=True, env=env, cwd=tmp_path)
    return log.read_text().splitlines()


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_torch_already_installed_is_kept(tmp_path) -> None:
    assert _run(tmp_path, has_torch=True) == ["-c import torch"]  # and a "[setup]" line, no install


def test_missing_torch_installs_the_readme_commands(tmp_path) -> None:
    readme = (ROOT / "README.md").read_text()
    (tmp_path / "a").mkdir()
    default = _run(tmp_path / "a", has_torch=False)
    assert default[1] == "-m pip install --progress-bar off torch==2.13.0"
    assert "`pip install torch==2.13.0`" in readme and "CUDA build" in readme
    (tmp_path / "b").mkdir()
    cpu = _run(tmp_path / "b", has_torch=False, TORCH_INDEX_URL=CPU)
    assert cpu[1] == f"-m pip install --progress-bar off torch==2.13.0 --index-url {CPU}"
    assert f"pip install torch==2.13.0 --index-url {CPU}" in readme
    assert f"TORCH_INDEX_URL={CPU} bash scripts/demo.sh" in readme


def test_both_scripts_install_torch_through_the_one_script() -> None:
    for name in ("demo.sh", "test.sh"):
        text = (ROOT / "scripts" / name).read_text()
        assert "bash scripts/ensure_torch.sh" in text and "pip install -q torch" not in text
