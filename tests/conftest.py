"""Test-wide settings (never touch the network, deterministic seeds, headless plots) and the helpers
every test folder shares (``from tests.conftest import unit_vector``). Tiny models: ``tests/models.py``."""

from __future__ import annotations

import os

# Set before transformers / huggingface_hub are imported anywhere, so a missing model fails in
# milliseconds instead of after network retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The test models are tiny: an intra-op thread pool costs more than the arithmetic, and on a
    shared, busy host each OpenMP hand-off can wait a whole scheduler slice (100x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
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
