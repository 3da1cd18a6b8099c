"""A script run the way ``python SCRIPT ARGS`` runs it (``__name__ == "__main__"``, its own ``sys.argv``,
the working folder given), but inside this test process: the benchmarks' and examples' smoke runs then
share the worker's imported torch and transformers instead of paying ~2.5 s of imports each.

What a script changes in the process is put back afterwards: ``sys.argv``, ``sys.path``, the working
folder, torch's thread count and the environment. A script that must be a fresh process (one that
counts its own imports, or measures its own memory) starts that process itself."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import runpy
import sys
from pathlib import Path


def run_script(script: str | os.PathLike, args: list[str] = (), *, cwd: str | os.PathLike | None = None,
               env: dict[str, str] | None = None) -> str:
    """Run ``script`` with ``args`` as its command line; returns what it printed on stdout. A non-zero
    ``SystemExit`` (argparse's exit 2, ``raise SystemExit("why")``) fails with what it printed."""
    import torch

    script = Path(script)
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    saved_env, threads = dict(os.environ), torch.get_num_threads()
    out, err = io.StringIO(), io.StringIO()
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
                if exc.code not in (0, None):
                    raise AssertionError(f"{script.name} {' '.join(map(str, args))} exited with {exc.code!r}:\n"
                                         f"{out.getvalue()[-2000:]}\n{err.getvalue()[-3000:]}") from None
    finally:
        os.chdir(saved_cwd)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.environ.clear()
        os.environ.update(saved_env)
        torch.set_num_threads(threads)
        gc.collect()  # the script's models go now, not at the end of the worker
    return out.getvalue()
