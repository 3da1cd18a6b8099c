"""A collapse store that contradicts itself is refused on --resume, naming the first bad
piece; bad plot-collapse inputs and output paths are one clear line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from steerformer.collapse import CollapseResult, collapse
from steerformer.errors import CheckpointError, InvalidArgumentError, SteerformerError

from tests.models import make_model

KW = dict(n_prompts=3, length=8, passes=4, weights="random-per-pass", batch_size=2, seed=3)
runner = CliRunner()


def _stop_after(n: int):
    def on_pass(p: int, arrays) -> None:
        if p == n - 1:
            raise KeyboardInterrupt
    return on_pass


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A finished 4-pass run, and runs interrupted after 2 and after 3 passes."""
    root = tmp_path_factory.mktemp("stores")
    model = make_model("gpt_neo")
    full = collapse(model, out=root / "full", **KW)
    for n in (2, 3):
        with pytest.raises(KeyboardInterrupt):
            collapse(model, out=root / f"cut{n}", on_pass=_stop_after(n), **KW)
    return model, full, root


def _copy(stores, tmp_path: Path, name: str = "cut2") -> Path:
    dst = tmp_path / name
    shutil.copytree(stores[2] / name, dst)
    return dst


def _state(run: Path) -> dict:
    return torch.load(run / "state.pt", weights_only=True)


def _rewind(run: Path) -> None:  # `completed` rewound while the hidden state is from a later pass
    torch.save({**_state(run), "completed": 1}, run / "state.pt")


def _half_tokens(run: Path) -> None:
    s = _state(run)
    torch.save({**s, "hidden": s["hidden"][:, : s["hidden"].shape[1] // 2].clone()}, run / "state.pt")


def _edit_pass(run: Path) -> None:
    f = run / "passes" / "pass_000001.npz"
    with np.load(f) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["e"] = arrays["e"] * 0.5
    np.savez(f, **arrays)


def _truncate(name: str):
    def go(run: Path) -> None:
        f = run / name
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return go


def _remove(name: str):
    return lambda run: (run / name).unlink()


def _object_pass(run: Path) -> None:
    np.savez(run / "passes" / "pass_000001.npz", e=np.array([{"a": 1}], dtype=object), allow_pickle=True)


def _ahead(run: Path) -> None:  # `completed` ahead of the pass files
    torch.save({**_state(run), "completed": 3}, run / "state.pt")


def _garbage_run_json(run: Path) -> None:
    (run / "run.json").write_text("{not json")


def _text_prompts(run: Path) -> None:
    (run / "prompts.npy").write_text("hello world\n")


def _empty_state(run: Path) -> None:
    (run / "state.pt").write_bytes(b"")


def _old_store(run: Path) -> None:  # written before hashes were recorded
    info = json.loads((run / "run.json").read_text())
    info.pop("integrity")
    (run / "run.json").write_text(json.dumps(info))


@pytest.mark.parametrize("corrupt, named", [
    (_rewind, "state.pt"),
    (_half_tokens, "state.pt"),
    (_edit_pass, "pass_000001.npz"),
    (_truncate("passes/pass_000002.npz"), "pass_000002.npz"),
    (_remove("passes/pass_000002.npz"), "pass_000002.npz is missing"),
    (_object_pass, "pass_000001.npz"),
    (_truncate("embedding.npz"), "embedding.npz"),
    (_remove("embedding.npz"), "embedding.npz is missing"),
    (_text_prompts, "prompts.npy"),
    (_truncate("prompts.npy"), "prompts.npy"),
    (_truncate("state.pt"), "state.pt"),
    (_empty_state, "state.pt"),
    (_ahead, "state.pt"),
    (_garbage_run_json, "run.json"),
    (_old_store, "cannot verify"),
], ids=["completed-rewound", "hidden-half-the-tokens", "edited-pass-values", "truncated-pass-file",
        "missing-pass-file", "object-array-pass-file", "truncated-embedding", "missing-embedding",
        "text-prompts-npy", "truncated-prompts", "truncated-state", "empty-state", "completed-ahead-of-files",
        "garbage-run-json", "old-store-without-hashes"])
def test_resume_refuses_a_store_that_contradicts_itself(stores, tmp_path, corrupt, named) -> None:
    model = stores[0]
    run = _copy(stores, tmp_path)
    corrupt(run)
    with pytest.raises(CheckpointError, match="out=") as info:
        collapse(model, out=run, resume=True, **KW)
    assert named in str(info.value)


def test_resume_after_kill_between_run_json_and_state_is_bit_identical(stores, tmp_path, monkeypatch) -> None:
    """run.json learns the next state's hash before state.pt is replaced: a kill in between leaves
    run.json one pass ahead of the state, which must still resume (that pass is recomputed)."""
    import os

    from steerformer.collapse import store as store_mod

    model, full, root = stores
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("state.pt") and torch.load(src, weights_only=True)["completed"] == 3:
            raise KeyboardInterrupt  # "killed" after run.json was written, before state.pt moved
        return real(src, dst)

    monkeypatch.setattr(store_mod.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        collapse(model, out=tmp_path / "run", **KW)
    monkeypatch.setattr(store_mod.os, "replace", real)
    run = tmp_path / "run"
    assert len(json.loads((run / "run.json").read_text())["integrity"]["states"]) == 3
    assert _state(run)["completed"] == 2
    resumed = collapse(model, out=run, resume=True, **KW)
    for s in ("e", "pairwise", "centroid"):
        np.testing.assert_array_equal(getattr(resumed, s), getattr(full, s))
    assert torch.equal(_state(run)["hidden"], torch.load(root / "full" / "state.pt", weights_only=True)["hidden"])


def test_store_files_follow_the_umask(stores) -> None:
    import stat

    from steerformer.outputs import current_umask

    expected = 0o666 & ~current_umask()
    for f in ("run.json", "state.pt", "prompts.npy", "passes/pass_000001.npz"):
        assert stat.S_IMODE((stores[2] / "full" / f).stat().st_mode) == expected, f


def test_collapse_out_into_a_foreign_folder_is_refused(tmp_path) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "run.json").write_text("{}")  # not a collapse run, yet a marker name: resume says so
    (other / "thesis.tex").write_text("x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("x")
    with pytest.raises(InvalidArgumentError, match="not a steerformer collapse output"):
        collapse(make_model("gpt2-base"), n_prompts=2, length=4, passes=1, out=foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]
    with pytest.raises(SteerformerError, match="run.json"):
        collapse(make_model("gpt2-base"), n_prompts=2, length=4, passes=1, out=other, resume=True)


# ---- CLI --------------------------------------------------------------------------------------
def _cli(args):
    from steerformer_cli.main import app

    res = runner.invoke(app, args)
    assert "Traceback" not in res.output
    return res


def test_cli_resume_of_a_corrupt_store_is_one_line(stores, tmp_path) -> None:
    model = tmp_path / "model"
    stores[0].save_pretrained(model)
    run = _copy(stores, tmp_path)
    _empty_state(run)  # used to print only "Aborted." (click's EOFError)
    res = _cli(["collapse", str(model), "--resume", "--out", str(run), "--no-decode", "--n-prompts", "3",
                "--length", "8", "--passes", "4", "--weights", "random-per-pass", "--batch-size", "2", "--seed", "3"])
    assert res.exit_code == 2 and "Aborted" not in res.output and "state.pt" in res.output, res.output


@pytest.mark.parametrize("args, words", [
    (["--decode-passes", "a,b"], ["--decode-passes", "'a,b'"]),
    (["--decode-passes", "0"], ["--decode-passes", "'0'"]),
    (["--device", "quantum"], ["--device", "quantum"]),
    (["--out", "FOREIGN"], ["--out", "not a steerformer collapse output"]),
], ids=["decode-passes-not-numbers", "decode-passes-zero", "device-quantum", "out-foreign-folder"])
def test_cli_cheap_checks_come_before_loading_the_model(tmp_path, args, words) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("x")
    args = [str(foreign) if a == "FOREIGN" else a for a in args]
    out = [] if "--out" in args else ["--out", str(tmp_path / "run")]
    # "nope/not-loaded" cannot be loaded: the error is about the option, so it came first
    res = _cli(["collapse", "nope/not-loaded", *out, *args])
    assert res.exit_code == 2
    for w in words:
        assert w in res.output, res.output


def _bad_npz(kind: str, tmp_path: Path) -> Path:
    p = tmp_path / "bad.npz"
    if kind == "garbage":
        p.write_bytes(b"\x00garbage" * 10)
    elif kind == "object":
        np.savez(p, e=np.array([object()], dtype=object), allow_pickle=True)
    elif kind == "bad-meta":
        z = np.zeros((1, 2, 3))
        np.savez(p, e=z, pairwise=z, centroid=z, e0=np.zeros(3), pairwise0=np.zeros(3), centroid0=np.zeros(3),
                 token_ids=np.zeros((3, 4), dtype=np.int64), options="{", meta="[]")
    return p


@pytest.mark.parametrize("kind", ["garbage", "object", "bad-meta"],
                         ids=["garbage-npz", "object-array-npz", "bad-meta-npz"])
def test_plot_collapse_bad_npz_is_one_line(tmp_path, kind) -> None:
    res = _cli(["plot-collapse", str(_bad_npz(kind, tmp_path)), "--out", str(tmp_path / "f.png")])
    assert res.exit_code == 2 and "bad.npz" in res.output and "collapse.npz" in res.output, res.output
    assert not (tmp_path / "f.png").exists()


def test_plot_collapse_corrupt_partial_run_is_one_line(stores, tmp_path) -> None:
    run = _copy(stores, tmp_path)
    (run / "collapse.npz").unlink()  # read the stored passes themselves
    (run / "passes" / "pass_000001.npz").write_bytes(b"junk")
    res = _cli(["plot-collapse", str(run), "--out", str(tmp_path / "f.png")])
    assert res.exit_code == 2 and "pass_000001.npz" in res.output, res.output


def test_plot_collapse_out_semantics(stores, tmp_path) -> None:
    full = str(stores[2] / "full")
    res = _cli(["plot-collapse", full, "--out", str(tmp_path / "p.xyz")])
    assert res.exit_code == 2 and "--out" in res.output and ".png" in res.output
    folder = tmp_path / "figs"
    folder.mkdir()
    res = _cli(["plot-collapse", full, "--out", str(folder)])  # an existing folder: the figure goes inside
    assert res.exit_code == 0 and str(folder / "collapse_runs.png") in res.output
    assert (folder / "collapse_runs.png").read_bytes()[:4] == b"\x89PNG"
    assert not Path(str(folder) + ".png").exists()
    res = _cli(["plot-collapse", full, "--out", str(tmp_path / "noext")])
    assert res.exit_code == 0 and (tmp_path / "noext.png").is_file() and "noext.png" in res.output
    res = _cli(["plot-collapse", full, "--out", str(tmp_path / "f.pdf")])
    assert res.exit_code == 0 and (tmp_path / "f.pdf").read_bytes()[:4] == b"%PDF"
