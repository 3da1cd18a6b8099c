"""The hardening tests' ``run_cli`` forks each command from a zygote that has imported torch and
transformers once: the command must still behave as a fresh ``python -c`` process would — its own
exit status, stdout and stderr, working folder, environment and stdin, killed at its time limit, and
the next command unaffected."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import cli_process
from tests.cli_process import ENTRY, ROOT, run_cli


def fresh(args: list, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **kw.pop("env", {})}
    return subprocess.run([sys.executable, "-c", ENTRY, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300, **kw)


def commands_started(monkeypatch) -> list:
    """The command lines of the processes started from now on (the zygote's own start included)."""
    started = []
    real = subprocess.Popen

    def popen(cmd, *a, **k):
        started.append(cmd)
        return real(cmd, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


@pytest.mark.parametrize("args", [["--version"], ["simulate", "no-such-setup"], ["steer", "--max-kl", "abc", "x"],
                                  ["analyze", "no/such/folder", "--json"]])
def test_a_forked_command_gives_what_a_fresh_process_gives(args, monkeypatch) -> None:
    started = commands_started(monkeypatch)
    forked = run_cli(args)
    assert [c for c in started if c[2] != cli_process.ZYGOTE] == []  # it did go through the zygote
    monkeypatch.undo()
    expected = fresh(args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (expected.returncode, expected.stdout, expected.stderr)


def test_a_forked_command_runs_in_its_folder_with_its_environment(tmp_path) -> None:
    out = tmp_path / "runs" / "fig"
    res = run_cli(["simulate", "fig13a", "--runs", "2", "--t1", "0.5", "--out", "runs/fig"], cwd=tmp_path,
                  env={"STEERFORMER_CACHE": str(tmp_path / "cache")})
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "result.json").is_file() and not (ROOT / "runs" / "fig").exists()
    assert os.environ.get("STEERFORMER_CACHE") != str(tmp_path / "cache")  # the worker's own is untouched


def test_a_command_past_its_time_limit_is_killed_and_the_next_one_runs() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(["simulate", "5.1.2"], timeout=0.5)  # minutes of work
    assert run_cli(["--version"]).stdout == fresh(["--version"]).stdout


def test_an_environment_that_changes_what_the_imports_read_gets_a_fresh_process(monkeypatch) -> None:
    started = commands_started(monkeypatch)
    res = run_cli(["--version"], env={"HF_HOME": "/nonexistent"})
    # huggingface_hub reads HF_HOME when it is imported: a fresh Python runs the command itself
    assert res.returncode == 0 and [c[:3] for c in started if c[2] != cli_process.ZYGOTE] == [[sys.executable, "-c", ENTRY]]


def test_commands_started_together_run_side_by_side(tmp_path) -> None:
    from tests.cli_process import start_cli

    commands = [start_cli(["simulate", "fig13a", "--runs", "2", "--t1", "0.5", "--out", tmp_path / str(i)])
                for i in range(3)]
    assert len({c.pid for c in commands}) == 3
    assert [c.wait(timeout=300).returncode for c in commands] == [0, 0, 0]
    assert all((tmp_path / str(i) / "result.json").is_file() for i in range(3))
