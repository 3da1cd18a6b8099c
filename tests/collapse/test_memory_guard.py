"""The memory a collapse run's counts imply is estimated before anything is allocated: a count that
cannot fit is one line saying how much it needs (not an allocation error minutes later), and
nothing is written."""

from __future__ import annotations

import os
import re

import pytest
import torch

from steerformer.collapse import collapse
from steerformer.errors import InvalidArgumentError
from steerformer.resources import GiB, physical_memory

from tests.conftest import run_cli
from tests.models import make_model


pytestmark = pytest.mark.skipif(physical_memory() is None, reason="this platform does not report its memory")


@pytest.mark.parametrize("flag, value, other", [
    ("--n-prompts", "1000000000", ["--passes", "1"]),
    ("--passes", "1000000000000", ["--n-prompts", "2"]),
], ids=["n-prompts-1e9", "passes-1e12"])
def test_a_count_that_cannot_fit_is_one_line_with_the_memory_it_needs(tiny_checkpoint, tmp_path, flag, value,
                                                                        other) -> None:
    res = run_cli(["collapse", str(tiny_checkpoint), flag, value, *other, "--length", "4", "--no-decode",
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(f"error: {flag}={value} is invalid") and "needs about" in last and "GiB" in last, last
    need = float(re.search(r"needs about ([\d,.]+) GiB", last).group(1).replace(",", ""))
    assert need * GiB > physical_memory()
    fit = int(re.search(rf"Use {flag}=(\d+) or fewer", last).group(1))
    assert 1 <= fit < int(value)
    assert not (tmp_path / "out").exists()


def test_the_estimate_counts_what_the_run_allocates() -> None:
    """passes × blocks × prompts statistics, float64, three of them, buffer and result: the estimate
    for 10^12 passes is 2 · 3 · 8 bytes · 10^12 · L · P plus the small terms."""
    model = make_model("gpt2-base", dtype=torch.float32)
    with pytest.raises(InvalidArgumentError, match=r"passes=1000000000000 is invalid") as info:
        collapse(model, n_prompts=2, length=4, passes=10 ** 12)
    need = float(re.search(r"needs about ([\d,.]+) GiB", str(info.value)).group(1).replace(",", ""))
    stats = 2 * 3 * 8 * 10 ** 12 * 2 * 2 / GiB  # L = 2 blocks, P = 2 prompts
    assert abs(need - stats) / stats < 1e-3


def test_a_run_that_fits_is_not_refused(tmp_path) -> None:
    res = collapse(make_model("gpt2-base", dtype=torch.float32), n_prompts=3, length=4, passes=2, out=tmp_path / "o")
    assert res.n_passes == 2 and os.path.isdir(tmp_path / "o")
