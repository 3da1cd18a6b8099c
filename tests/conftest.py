"""Test-wide settings (never touch the network, deterministic seeds, headless plots) and the helpers
every test folder shares (``from tests.conftest import unit_vector``). Tiny models: ``tests/models.py``."""

from __future__ import annotations

import os

# Set before transformers / huggingface_hub are imported anywhere, so a missing model fails in
# milliseconds instead of after network retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# One BLAS/OpenMP thread per process, the test processes' children included: the suite runs one worker
# per core (pytest-xdist), and a worker's BLAS threads then only fight each other — on this project's
# 2-core CI a 384x384 eig took 0.06 s on one thread and 0.5-1.5 s on two.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The test models are tiny: an intra-op thread pool costs more than the arithmetic, and on a
    shared, busy host each OpenMP hand-off can wait a whole scheduler slice (100x slower). The BLAS
    pools numpy and scipy loaded before this file set the variables above are limited here too."""
    from threadpoolctl import threadpool_limits

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    np.random.seed(0)


def random_vector(d: int = 64, seed: int = 0) -> torch.Tensor:
    """A seeded standard-normal float64 vector of length ``d`` (a direction before normalizing)."""
    return torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def unit_vector(d: int, seed: int) -> torch.Tensor:
    """:func:`random_vector` scaled to unit length."""
    v = random_vector(d, seed)
    return v / v.norm()


def is_progress_line(line: str) -> bool:
    """A line the CLI prints on stderr while it works (transformers' loading bar, "loaded MODEL",
    steer's phase lines "steering: ... ..."): progress, not part of an error's one line."""
    line = line.strip()
    return "Loading weights" in line or line.startswith("loaded ") or line.endswith(" ...")


def run_cli(args: list) -> object:
    """``steerformer ARGS`` in-process (typer's CliRunner), asserting that no traceback reached the
    user: the result, for its ``exit_code`` and ``output``."""
    from typer.testing import CliRunner

    from steerformer_cli.main import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output, res.output
    return res


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A tiny GPT-2 with its LM head saved as a float32 checkpoint folder (``model``), with a
    direction ``u.npy`` of its width beside it. Shared: copy it before breaking it."""
    from .models import make_model

    d = tmp_path_factory.mktemp("tiny") / "model"
    make_model("gpt2", dtype=torch.float32).save_pretrained(d)
    np.save(d.parent / "u.npy", np.ones(64))
    return d


def kill_when_ready(script: str, ready, timeout: float = 180.0) -> None:
    """Run ``script`` in a fresh Python, wait until it creates the file ``ready``, then ``kill -9`` it."""
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
