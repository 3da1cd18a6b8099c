"""`analyze` and the math under it with device="cuda", on the CPU-backed fake GPU of
tests/fake_cuda.py: every variant runs, its numbers equal the CPU run's, and tensors meant for
further work stay on the device asked for. (A real card: benchmarks/gpu_smoke.sh.)"""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import steerformer as sf
from steerformer import eig
from steerformer.spectra import sorted_eig

from tests.device_checks import assert_same_numbers, save_tiny_llama
from tests.fake_cuda import fake_cuda
from tests.models import make_model

PROMPTS = ["The cat sat on the mat.", "Rivers run to the sea."]


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """LAPACK's eig on a shared, loaded host: 2 OpenBLAS threads took 6-20 s for d = 384, 1 thread 0.5 s."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("device") / "llama")


def _numbers(report) -> dict:
    doc = report.to_dict()
    doc["meta"] = {k: v for k, v in doc["meta"].items() if k not in ("device", "created")}
    return doc


def _on_both(run):
    """(run("cpu"), run("cuda") on the fake GPU)."""
    want = run("cpu")
    with fake_cuda():
        got = run("cuda")
    return want, got


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_spectra_only_on_cuda_equal_the_cpu_run(name, llama) -> None:
    model = llama if name == "llama" else make_model("gpt2", dtype=torch.float32)
    want, got = _on_both(lambda dev: sf.analyze(model, device=dev, stats=False))
    assert got.meta["device"] == "cuda"
    assert_same_numbers(_numbers(want), _numbers(got))
    if name == "llama":
        assert all(m.startswith("factored") for m in got.spectra.method)


def test_statistics_null_model_and_cumulative_on_cuda_equal_the_cpu_run(llama) -> None:
    opts = dict(n_prompts=3, n_tokens=6, null_draws=3, cumulative=True)
    want, got = _on_both(lambda dev: sf.analyze(llama, device=dev, **opts))
    assert got.power.controlled.meta["cumulative"] and "null_delta_mean" in got.power.controlled.layers[0]
    assert_same_numbers(_numbers(want), _numbers(got), rtol=1e-10, atol=1e-12)


def test_prolonged_run_of_shared_layers_on_cuda_equals_the_cpu_run() -> None:
    model = make_model("albert", dtype=torch.float64)
    opts = dict(n_prompts=2, n_tokens=5, null_draws=0, prolong=2)
    want, got = _on_both(lambda dev: sf.analyze(model, device=dev, **opts))
    assert got.power.prolonged is not None
    assert_same_numbers(_numbers(want), _numbers(got), rtol=1e-10, atol=1e-12)


def test_full_model_variant_runs_the_model_on_cuda() -> None:
    opts = dict(layers=None, n_prompts=2, n_tokens=4, null_draws=0, prompts=PROMPTS)
    want, got = _on_both(lambda dev: sf.analyze(sf.BUNDLED_MINILM, device=dev, **opts))
    assert got.power.full_model is not None and got.power.full_model.meta["n_prompts"] == 2
    assert_same_numbers(_numbers(want), _numbers(got), rtol=1e-9, atol=1e-10)
    with fake_cuda():
        hs = sf.model_hidden_states(sf.BUNDLED_MINILM, PROMPTS, device="cuda")
    assert hs.states.device.type == "cpu"  # states come back to the host for the statistics
    torch.testing.assert_close(hs.states, sf.model_hidden_states(sf.BUNDLED_MINILM, PROMPTS).states)


def test_alignment_statistics_of_states_on_cuda(llama) -> None:
    """The Llama-3-8B crash of issue 18: states on the GPU, cumulative bases from the CPU."""
    mats = sf.layer_matrices(llama)
    sp = sf.spectra(mats)
    want = sf.alignment_stats(sf.run_dynamics(llama, n_prompts=2, n_tokens=5), sp, matrices=mats)
    with fake_cuda():
        traj = sf.run_dynamics(llama, n_prompts=2, n_tokens=5, device="cuda")
        assert traj.states.device.type == "cuda"
        got = sf.alignment_stats(traj, sp, matrices=mats)
    assert got.meta["cumulative"]
    assert_same_numbers(want.to_dict(), got.to_dict(), rtol=1e-10, atol=1e-12)


def test_eigensolver_on_the_gpu_branch(monkeypatch) -> None:
    """Problems from CUDA_EIG_FROM on are solved on the device (torch.linalg.eig there); lowered
    here so a small matrix takes that branch. Sorting and phase happen on the host."""
    g = torch.Generator().manual_seed(1)
    F = torch.randn(3, 24, 24, generator=g, dtype=torch.float64)
    want = sf.spectra(F)
    monkeypatch.setattr(eig, "CUDA_EIG_FROM", 8)
    with fake_cuda():
        assert eig.solver_device(24, "cuda").type == "cuda" and eig.solver_device(4, "cuda").type == "cpu"
        got = sf.spectra(F.to("cuda"), device="cuda")
        vals, vecs = sorted_eig(F[0].to("cuda"), device="cuda")
        assert vals.device.type == "cuda" and vecs.device.type == "cuda"  # sorted_eig keeps the device
        vals, vecs = vals.cpu(), vecs.cpu()
    assert got.eigenvalues.device.type == "cpu"  # a Spectra lives on the host
    torch.testing.assert_close(got.eigenvalues, want.eigenvalues, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(vals, want.eigenvalues[0], rtol=1e-10, atol=1e-10)
    for k in range(3):  # eigenvectors agree up to the fixed phase convention
        assert torch.allclose(got.eigenvectors[k][:, :4], want.eigenvectors[k][:, :4], atol=1e-8)


def test_top_k_and_factored_spectra_of_matrices_on_cuda(llama) -> None:
    F = torch.randn(2, 40, 40, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    want = sf.spectra(F, top_k=4)
    mats = sf.layer_matrices(llama)
    want_f = sf.spectra(mats)
    with fake_cuda():
        got = sf.spectra(F.to("cuda"), device="cuda", top_k=4)
        on_dev = sf.layer_matrices(llama, device="cuda")
        assert on_dev.matrices.device.type == "cuda" and on_dev.factors[0][0].device.type == "cuda"
        got_f = sf.spectra(on_dev, device="cuda")
    assert got.method == want.method == ["top-4", "top-4"]
    torch.testing.assert_close(got.eigenvalues, want.eigenvalues, rtol=1e-10, atol=1e-12)
    assert got_f.method == want_f.method
    torch.testing.assert_close(got_f.eigenvalues, want_f.eigenvalues, rtol=1e-10, atol=1e-12)


def test_cli_analyze_device_cuda(tmp_path, llama) -> None:
    from steerformer_cli.main import app

    with fake_cuda():
        res = CliRunner().invoke(app, ["analyze", str(llama), "--device", "cuda", "--no-plots", "--n-prompts", "2",
                                       "--n-tokens", "4", "--null-draws", "2", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert '"device": "cuda"' in (tmp_path / "a" / "report.json").read_text()
