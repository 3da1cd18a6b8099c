"""A script run the way ``python SCRIPT ARGS`` runs it (``__name__ == "__main__"``, its own ``sys.argv``,
the working folder given), but inside this test process: the benchmarks' and examples' smoke runs then
share the worker's imported torch and transformers instead of paying ~2.5 s of imports each.

What a script changes in the process is put back afterwards, whether it returns, exits or raises:
``sys.argv``, ``sys.path``, the working folder, the environment, torch's thread count, default dtype and
gradient mode, and the modules it imported from its own folder or from a folder it put on ``sys.path``
(two scripts' ``data.py`` or ``_common.py`` in one worker are then two modules, never the first one's
for both); a module of the same name that the process loaded from elsewhere is set aside while the
script runs, as a fresh ``python SCRIPT`` would not see it. A script that must be a fresh process (one that counts its own imports, or measures its own
memory) starts that process itself."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import runpy
import subprocess
import sys
from pathlib import Path


def _imported_from(paths: list[str], before: set[str]) -> list[str]:
    """The modules imported since ``before`` whose top-level module was not there before and lives in
    one of ``paths`` (a script's own modules: its folder's ``data.py``, ``_common.py``...)."""
    roots = [Path(p).resolve() for p in paths if p]
    mine = set()
    for name in set(sys.modules) - before:
        top = name.partition(".")[0]
        if top in before:
            continue  # a submodule of a package the process had already (torch, steerformer): kept
        file = getattr(sys.modules.get(top), "__file__", None)
        if file and any(r == Path(file).resolve().parent or r in Path(file).resolve().parents for r in roots):
            mine.add(name)
    return sorted(mine)


def _shadowing(folder: Path) -> dict:
    """The modules loaded from elsewhere under a name the script's folder holds (a ``data`` imported by
    another test): set aside while the script runs, as a fresh ``python SCRIPT`` would not see them."""
    folder = folder.resolve()
    tops = {name for name in sys.modules if "." not in name
            and ((folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file())}
    tops = {t for t in tops if Path(getattr(sys.modules[t], "__file__", None) or "/").resolve().parent
            not in (folder, folder / t)}
    return {n: m for n, m in sys.modules.items() if n.partition(".")[0] in tops}


def run_script_result(script: str | os.PathLike, args: list[str] = (), *, cwd: str | os.PathLike | None = None,
                      env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` with ``args`` as its command line; its exit status (0, or a ``SystemExit``'s code,
    1 for a message), stdout and stderr as a ``CompletedProcess``. Any other exception propagates (a
    traceback fails the test). The process is restored afterwards (see the module doc)."""
    import torch

    script = Path(script)
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    saved_env, threads = dict(os.environ), torch.get_num_threads()
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    aside = _shadowing(script.parent)
    for name in aside:
        del sys.modules[name]
    modules = set(sys.modules)
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    try:
        os.environ.update(env or {})
        sys.argv = [str(script), *map(str, args)]
        sys.path.insert(0, str(script.parent))  # as `python SCRIPT` puts the script's folder first
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exc:
                code = exc.code
                if code not in (0, None) and not isinstance(code, int):
                    print(code, file=sys.stderr)  # what Python prints for `raise SystemExit("why")`
                    code = 1
    finally:
        added = [p for p in sys.path if p not in saved_path] + [str(script.parent)]
        for name in _imported_from(added, modules):
            del sys.modules[name]
        sys.modules.update(aside)
        os.chdir(saved_cwd)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.environ.clear()
        os.environ.update(saved_env)
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        gc.collect()  # the script's models go now, not at the end of the worker
    return subprocess.CompletedProcess([str(script), *map(str, args)], code or 0, out.getvalue(), err.getvalue())


def run_script(script: str | os.PathLike, args: list[str] = (), *, cwd: str | os.PathLike | None = None,
               env: dict[str, str] | None = None) -> str:
    """Run ``script`` with ``args`` as its command line; returns what it printed on stdout. A non-zero
    ``SystemExit`` (argparse's exit 2, ``raise SystemExit("why")``) fails with what it printed."""
    res = run_script_result(script, args, cwd=cwd, env=env)
    if res.returncode != 0:
        raise AssertionError(f"{Path(script).name} {' '.join(map(str, args))} exited with {res.returncode!r}:\n"
                             f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    return res.stdout
