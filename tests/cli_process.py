"""The CLI of this checkout run in a fresh Python with a time limit: for the hardening tests whose
failure would be a hang (a FIFO opened for reading), a prompt on stdin or a process limit
(``ulimit -f``); :func:`run_cli_here`, the same result from an in-process run, for the other cases of
those tests (a fresh Python costs ~3 s of imports)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_cli(args: list, *, stdin: str = "", timeout: float = 300, cwd: Path | None = None,
            env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    """``steerformer ARGS`` fed ``stdin``; a hang fails the test (``subprocess.TimeoutExpired``)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run([sys.executable, "-c", "from steerformer_cli.main import app; app()", *map(str, args)],
                          input=stdin, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                          preexec_fn=preexec_fn)


def run_cli_here(args: list, *, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``steerformer ARGS`` in this process (typer's CliRunner), as a ``CompletedProcess`` with stdout and
    stderr apart, for :func:`one_error_line`. Not for a case that could hang or needs a process limit."""
    from typer.testing import CliRunner

    from steerformer_cli.main import app

    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        res = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(here)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


def one_error_line(res: subprocess.CompletedProcess) -> str:
    """The single ``error:`` line of a refused command (exit 2), asserted to be alone."""
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-3000:])
    assert "Traceback" not in res.stdout + res.stderr, res.stderr[-3000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]  # progress lines aside
    assert len(errors) == 1 and res.stderr.strip().splitlines()[-1] == errors[0], res.stderr[-3000:]
    return errors[0]
