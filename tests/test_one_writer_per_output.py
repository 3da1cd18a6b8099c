"""One writer per output: writers racing for the same ``--out`` folder or ``--record`` file never
replace each other without ``--overwrite`` (exactly one wins, the others get one line), and with
``--overwrite`` the last complete output wins with nothing mixed. Threads meet at a barrier right
before the save; processes are started together (the outcome does not depend on their timing:
a writer that overlaps another is refused by the lock, one that comes after by the rules)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from steerformer.errors import InvalidArgumentError
from steerformer.steering import save_steered, steer, steer_checkpoint

from tests.cli_process import run_cli_here, start_cli
from tests.models import make_model

N = 3


def _race(calls) -> list:
    """Run the ``calls`` in threads that start them together; their results or exceptions."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i):
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - collected for the assertions
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads)
    return results


def _steered_models():
    models = []
    for i in range(N):
        m = make_model("gpt2-base", dtype=torch.float32)
        steer(m, torch.ones(64, dtype=torch.float64), strength=1.0 + i, solve="exact", report=False)
        models.append(m)
    return models


def _which(out: Path, models) -> int:
    """The one model whose weights the folder holds, bit for bit (none or two: a mix)."""
    saved = load_file(out / "model.safetensors")
    match = [i for i, m in enumerate(models)
             if all(torch.equal(saved[k], v) for k, v in m.state_dict().items() if k in saved)]
    assert len(match) == 1, match
    return match[0]


def _refusals(results) -> list[str]:
    return [str(r) for r in results if isinstance(r, InvalidArgumentError)]


def test_threads_saving_one_folder_without_overwrite_one_wins(tmp_path) -> None:
    models = _steered_models()
    out = tmp_path / "out"
    results = _race([lambda m=m: save_steered(m, out) for m in models])
    assert sum(isinstance(r, Path) for r in results) == 1, results
    refused = _refusals(results)
    assert len(refused) == N - 1 and all(("writing it right now" in r or "earlier steer output" in r)
                                         for r in refused), refused
    _which(out, models)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no lock, no temporary left


def test_threads_saving_one_folder_with_overwrite_last_complete_wins(tmp_path) -> None:
    models = _steered_models()
    out = tmp_path / "out"
    results = _race([lambda m=m: save_steered(m, out, overwrite=True) for m in models])
    assert all(isinstance(r, Path) for r in results), results
    _which(out, models)  # one model's weights, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_threads_running_steer_checkpoint_on_one_folder_one_wins(tmp_path) -> None:
    src = tmp_path / "model"
    make_model("gpt2-base", dtype=torch.float32).save_pretrained(src)
    out = tmp_path / "out"
    results = _race([lambda g=g: steer_checkpoint(src, out, eigvec=0, gain=g) for g in (1.0, 2.0, 3.0)])
    assert sum(not isinstance(r, Exception) for r in results) == 1, results
    assert len(_refusals(results)) == N - 1, results
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out"]


def _processes(args_list) -> list[subprocess.CompletedProcess]:
    """The commands as processes of their own, all started before any is waited for."""
    commands = [start_cli(a) for a in args_list]
    return [c.wait(timeout=600) for c in commands]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ck") / "model"
    make_model("gpt2-base", dtype=torch.float32).save_pretrained(d)
    return d


@pytest.mark.parametrize("overwrite", [False, True], ids=["without-overwrite", "with-overwrite"])
def test_four_steer_processes_on_one_out(checkpoint, tmp_path, overwrite) -> None:
    out = tmp_path / "out"
    runs = _processes([["steer", checkpoint, "--eigvec", "0", "--gain", str(g), "--solve", "exact", "--out", out,
                        "--record", tmp_path / "r.json"] + (["--overwrite"] if overwrite else [])
                       for g in (1, 2, 3, 4)])
    codes = sorted(r.returncode for r in runs)
    if overwrite:
        assert codes == [0, 0, 0, 0], [r.stderr[-1500:] for r in runs]
    else:
        assert codes == [0, 2, 2, 2], [r.stderr[-1500:] for r in runs]
        for r in runs:
            if r.returncode == 2:
                errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
                assert len(errors) == 1 and "--out" in errors[0] and "Traceback" not in r.stderr, r.stderr[-1500:]
    v = run_cli_here(["verify", out])
    assert v.returncode == 0, v.stdout[-2000:] + v.stderr[-2000:]  # one writer's complete output: nothing mixed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "r.json"]
