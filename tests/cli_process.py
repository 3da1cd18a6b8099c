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
would run it, only without paying those imports again; :func:`start_cli` starts several side by side
(a race of writers). Where a fresh process is what a test needs,
:func:`run_cli` starts one: a ``preexec_fn`` (a process limit set before Python starts), or an
environment that changes what those imports read when they load (``HF_*``, ``TRANSFORMERS_*``,
thread counts, ``PYTHONPATH``, ``HOME``...)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "from steerformer_cli.main import app; app()"

# Read by torch, transformers or huggingface_hub when they are imported (cache folders, offline mode,
# thread pools) or by Python at start: a command whose environment differs from the zygote's in one of
# these gets a fresh process.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "OPENBLAS",
                        "PYTHON", "XDG_", "HOME", "TMPDIR", "LD_", "CUDA", "TOKENIZERS", "SAFETENSORS")

ZYGOTE = r"""
import json, os, selectors, sys, traceback
import torch, transformers, transformers.modeling_utils  # the 3-5 s every fresh CLI process paid
import steerformer_cli.main
protocol_in, protocol_out = os.fdopen(os.dup(0), "rb", buffering=0), os.fdopen(os.dup(1), "w")
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


def send(msg):
    protocol_out.write(json.dumps(msg) + "\n"); protocol_out.flush()


# Several commands may run at once (a test racing four writers): each request is forked at once and
# answered with its pid; each exit is reported when it is reaped.
requests, children, pending = selectors.DefaultSelector(), set(), b""
requests.register(protocol_in.fileno(), selectors.EVENT_READ)
while True:
    if requests.select(0.02 if children else None):
        chunk = os.read(protocol_in.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                try:
                    run(req)
                finally:
                    os._exit(1)
            children.add(pid)
            send({"id": req["id"], "pid": pid})
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            send({"pid": pid, "status": status})
"""


def _environment(env: dict | None) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            **(env or {})}


class _Zygote:
    """The worker's zygote process and its pipe: commands are started (forked) and waited for by pid."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        self.buffer, self.started, self.exited, self.count = b"", {}, {}, 0
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

    def _until(self, table: dict, key, timeout: float | None):
        """Read the zygote's messages (started: id -> pid; exited: pid -> status) until ``key`` is in ``table``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while key not in table:
            line = self._line(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if line is None:
                return None
            msg = json.loads(line)
            if "status" in msg:
                self.exited[msg["pid"]] = msg["status"]
            else:
                self.started[msg["id"]] = msg["pid"]
        return table.pop(key)

    def start(self, args: list[str], stdin: str, cwd: Path | None, env: dict) -> "CliCommand":
        folder = Path(tempfile.mkdtemp(prefix="cli-"))
        paths = {name: folder / name for name in ("stdin", "stdout", "stderr")}
        paths["stdin"].write_text(stdin)
        paths["stdout"].touch()
        paths["stderr"].touch()
        self.count += 1
        req = {"id": self.count, "args": args, "cwd": str(cwd or os.getcwd()), "env": env,
               **{k: str(p) for k, p in paths.items()}}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        return CliCommand(args, self, self._until(self.started, self.count, timeout=60), folder)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class CliCommand:
    """A command started by :func:`start_cli`: :meth:`wait` gives its ``CompletedProcess``."""

    def __init__(self, args: list[str], zygote: _Zygote | None, pid: int | None, folder: Path | None,
                 proc: subprocess.Popen | None = None, stdin: str = "") -> None:
        self.args, self.zygote, self.pid, self.folder, self.proc, self.stdin = args, zygote, pid, folder, proc, stdin

    def wait(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """Its result; past ``timeout`` it is killed with what it started and ``TimeoutExpired`` raised."""
        cmd = [sys.executable, "-c", ENTRY, *self.args]
        if self.proc is not None:  # a fresh process
            try:
                out, err = self.proc.communicate(self.stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
                raise
            return subprocess.CompletedProcess(cmd, self.proc.returncode, out, err)
        try:
            with _lock:
                status = self.zygote._until(self.zygote.exited, self.pid, timeout)
                if status is None:  # a hang: kill the command and what it started, then say so as subprocess does
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.pid, signal.SIGKILL)
                    self.zygote._until(self.zygote.exited, self.pid, 60)
            out, err = ((self.folder / name).read_text(errors="replace") for name in ("stdout", "stderr"))
            if status is None:
                raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
            return subprocess.CompletedProcess(cmd, os.waitstatus_to_exitcode(status), out, err)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


_zygote: _Zygote | None = None
_lock = threading.RLock()


def _needs_fresh_process(env: dict, zygote_env: dict) -> bool:
    changed = {k for k in env.keys() | zygote_env.keys() if env.get(k) != zygote_env.get(k)}
    return any(k.upper().startswith(IMPORT_TIME_PREFIXES) for k in changed)


def start_cli(args: list, *, stdin: str = "", cwd: Path | None = None, env: dict | None = None,
              preexec_fn=None) -> CliCommand:
    """Start ``steerformer ARGS`` in a process of its own, fed ``stdin`` (several may run at once):
    forked from the worker's zygote unless a fresh Python is needed."""
    global _zygote
    full_env, args = _environment(env), [str(a) for a in args]
    with _lock:
        if _zygote is None and preexec_fn is None:
            _zygote = _Zygote(_environment(None))  # the worker's own environment, not this command's
            atexit.register(_zygote.close)
        if preexec_fn is None and not _needs_fresh_process(full_env, _zygote.env):
            return _zygote.start(args, stdin, cwd, full_env)
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd, preexec_fn=preexec_fn)
    return CliCommand(args, None, proc.pid, None, proc, stdin)


def run_cli(args: list, *, stdin: str = "", timeout: float = 300, cwd: Path | None = None,
            env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    """``steerformer ARGS`` in a process of its own, fed ``stdin``; a hang fails the test
    (``subprocess.TimeoutExpired``)."""
    return start_cli(args, stdin=stdin, cwd=cwd, env=env, preexec_fn=preexec_fn).wait(timeout)


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
