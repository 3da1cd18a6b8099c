"""The CLI of this checkout run in a fresh process with a time limit: for the hardening tests whose
failure would be a hang (a FIFO opened for reading), a prompt on stdin or a process limit
(``ulimit -f``); :func:`run_cli_here`, the same result from an in-process run, for the other cases of
those tests.

A fresh Python spends 3-5 s importing torch and transformers' model code before the command starts,
which was most of these tests' time. So :func:`run_cli` forks each command from a *zygote*: one
Python per test worker, started once from the same environment, that has imported torch,
``transformers.modeling_utils`` and the CLI's entry module and nothing else (no steerformer module,
no test code). The command still runs in its own process — its own pid, working folder, environment,
stdin, stdout and stderr files, exit status and time limit (killed on a hang) — as ``python -c ...``
would run it, only without paying those imports again. Where a fresh process is what a test needs,
:func:`run_cli` starts one: a ``preexec_fn`` (a process limit set before Python starts), or an
environment that changes what those imports read when they load (``HF_*``, ``TRANSFORMERS_*``,
thread counts, ``PYTHONPATH``, ``HOME``...)."""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "from steerformer_cli.main import app; app()"

# Read by torch, transformers or huggingface_hub when they are imported (cache folders, offline mode,
# thread pools) or by Python at start: a command whose environment differs from the zygote's in one of
# these gets a fresh process.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "OPENBLAS",
                        "PYTHON", "XDG_", "HOME", "TMPDIR", "LD_", "CUDA", "TOKENIZERS", "SAFETENSORS")

ZYGOTE = r"""
import json, os, sys, traceback
import torch, transformers, transformers.modeling_utils  # the 3-5 s every fresh CLI process paid
import steerformer_cli.main
protocol_in, protocol_out = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
devnull = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1):
    os.dup2(devnull, fd)
protocol_out.write("ready\n"); protocol_out.flush()


def run(req):
    os.setsid()  # its own process group: a hang is killed with everything it started
    os.close(protocol_in.fileno()); os.close(protocol_out.fileno())  # the command never sees the zygote's pipe
    os.chdir(req["cwd"])
    os.environ.clear(); os.environ.update(req["env"])
    for fd, (path, flags) in enumerate([(req["stdin"], os.O_RDONLY), (req["stdout"], os.O_WRONLY),
                                        (req["stderr"], os.O_WRONLY)]):
        os.dup2(os.open(path, flags), fd)
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                                       closefd=False)
    sys.argv = ["-c", *req["args"]]
    code = 0
    try:
        steerformer_cli.main.app()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr); code = 1
    except BaseException:
        traceback.print_exc(); code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


for line in protocol_in:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            run(req)
        finally:
            os._exit(1)
    protocol_out.write(json.dumps({"pid": pid}) + "\n"); protocol_out.flush()
    _, status = os.waitpid(pid, 0)
    protocol_out.write(json.dumps({"status": status}) + "\n"); protocol_out.flush()
"""


def _environment(env: dict | None) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            **(env or {})}


class _Zygote:
    """The worker's zygote process and its request pipe (one command at a time)."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        self.buffer = b""
        if self._line(timeout=120) != "ready":
            raise RuntimeError("the CLI zygote did not start")

    def _line(self, timeout: float | None) -> str | None:
        """The next line from the zygote, or None when ``timeout`` passes first."""
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                if not sel.select(timeout):
                    return None
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError("the CLI zygote exited")
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()

    def run(self, args: list[str], stdin: str, timeout: float, cwd: Path | None, env: dict):
        folder = Path(tempfile.mkdtemp(prefix="cli-"))
        try:
            paths = {name: folder / name for name in ("stdin", "stdout", "stderr")}
            paths["stdin"].write_text(stdin)
            paths["stdout"].touch()
            paths["stderr"].touch()
            req = {"args": args, "cwd": str(cwd or os.getcwd()), "env": env, **{k: str(p) for k, p in paths.items()}}
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            pid = json.loads(self._line(timeout=60))["pid"]
            reply = self._line(timeout=timeout)
            if reply is None:  # a hang: kill the command and what it started, then say so as subprocess does
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._line(timeout=60)
                raise subprocess.TimeoutExpired([sys.executable, "-c", ENTRY, *args], timeout,
                                                output=paths["stdout"].read_text(errors="replace"),
                                                stderr=paths["stderr"].read_text(errors="replace"))
            code = os.waitstatus_to_exitcode(json.loads(reply)["status"])
            return subprocess.CompletedProcess([sys.executable, "-c", ENTRY, *args], code,
                                               paths["stdout"].read_text(errors="replace"),
                                               paths["stderr"].read_text(errors="replace"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_zygote: _Zygote | None = None
_lock = threading.Lock()


def _needs_fresh_process(env: dict, zygote_env: dict) -> bool:
    changed = {k for k in env.keys() | zygote_env.keys() if env.get(k) != zygote_env.get(k)}
    return any(k.upper().startswith(IMPORT_TIME_PREFIXES) for k in changed)


def run_cli(args: list, *, stdin: str = "", timeout: float = 300, cwd: Path | None = None,
            env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    """``steerformer ARGS`` in a process of its own, fed ``stdin``; a hang fails the test
    (``subprocess.TimeoutExpired``). Forked from the worker's zygote unless a fresh Python is needed."""
    global _zygote
    full_env, args = _environment(env), [str(a) for a in args]
    with _lock:
        if _zygote is None and preexec_fn is None:
            _zygote = _Zygote(full_env)
            atexit.register(_zygote.close)
        if preexec_fn is None and not _needs_fresh_process(full_env, _zygote.env):
            return _zygote.run(args, stdin, timeout, cwd, full_env)
    return subprocess.run([sys.executable, "-c", ENTRY, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd, preexec_fn=preexec_fn)


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
