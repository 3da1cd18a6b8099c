"""A checkpoint is read only from inside itself, corrupt weight files are one clear line
(steerformer's reader, transformers and the CLI alike), and nothing is ever unpickled."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from steerformer import layer_matrices
from steerformer.errors import CheckpointError, InvalidArgumentError
from steerformer.loading import load_model

from tests.models import make_model, saved_model

runner = CliRunner()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return saved_model(tmp_path_factory.mktemp("ckpt") / "model", "gpt2-base")


def _cli(args) -> object:
    from steerformer_cli.main import app

    res = runner.invoke(app, args)
    assert "Traceback" not in res.output
    return res


def _copy(base: Path, tmp_path: Path) -> Path:
    d = tmp_path / "m"
    shutil.copytree(base, d)
    return d


# ---- shard index entries that leave the checkpoint ------------------------------------------
def _index_to(entry_for):
    """Split model.safetensors into two shards whose index names ``entry_for(folder)`` for one."""
    def make(d: Path) -> str:
        from safetensors.torch import load_file

        tensors = load_file(d / "model.safetensors")
        first = sorted(tensors)[0]
        rest = {k: v for k, v in tensors.items() if k != first}
        save_file(rest, d / "model-00002.safetensors", metadata={"format": "pt"})
        outside = d.parent / "outside.safetensors"  # a real, valid file outside the checkpoint
        save_file({first: tensors[first]}, outside, metadata={"format": "pt"})
        (d / "model.safetensors").unlink()
        entry = entry_for(d)
        wm = {k: "model-00002.safetensors" for k in rest} | {first: entry}
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
        return entry
    return make


def _fifo(d: Path) -> str:
    os.mkfifo(d / "pipe.safetensors")
    return "pipe.safetensors"


def _symlink_out(d: Path) -> str:
    os.symlink(d.parent / "outside.safetensors", d / "link.safetensors")
    return "link.safetensors"


ESCAPES = {
    "dotdot": lambda d: "../../" + d.parent.name + "/outside.safetensors",
    "absolute": lambda d: str(d.parent / "outside.safetensors"),
    "dev-zero": lambda d: "/dev/zero",
    "dev-urandom": lambda d: "/dev/urandom",
    "fifo-inside": _fifo,
    "symlink-outside": _symlink_out,
    "missing": lambda d: "nope.safetensors",
}


@pytest.mark.parametrize("case", list(ESCAPES))
def test_shard_index_escape_is_refused_before_opening(base, tmp_path, case) -> None:
    d = _copy(base, tmp_path)
    _index_to(ESCAPES[case])(d)
    with pytest.raises(CheckpointError, match="model.safetensors.index.json names") as info:
        layer_matrices(d)  # steerformer's own reader (the FIFO would hang if it were opened)
    assert ("refusing to read it" if case != "missing" else "does not exist") in str(info.value)
    with pytest.raises(CheckpointError, match="model.safetensors.index.json names"):
        load_model(d)  # before handing the folder to transformers (steer, collapse, bridge)
    res = _cli(["steer", str(d), "--eigvec", "0", "--gain", "1"])
    assert res.exit_code == 2 and "model.safetensors.index.json" in res.output


def test_cache_snapshot_symlinks_into_blobs_are_allowed(base, tmp_path) -> None:
    repo = tmp_path / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in base.iterdir():
        shutil.copy(f, repo / "blobs" / f"blob-{f.name}")
        os.symlink(f"../../blobs/blob-{f.name}", snap / f.name)
    ref = layer_matrices(base).matrices
    torch.testing.assert_close(layer_matrices(snap).matrices, ref, rtol=0, atol=0)
    assert load_model(snap) is not None


# ---- corrupt safetensors headers ---------------------------------------------------------------
def _st(header, data: bytes = b"", n: int | None = None) -> bytes:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(raw) if n is None else n) + raw + data


F = "h.0.attn.c_attn.weight"
HEADERS = {
    "header-len-2^62": _st({}, n=2 ** 62),
    "header-len-2^40": _st({}, n=2 ** 40),
    "data-end-2^50": _st({F: {"dtype": "F32", "shape": [2 ** 48], "data_offsets": [0, 2 ** 50]}}, b"\0" * 16),
    "reversed-offsets": _st({F: {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8),
    "overlapping-offsets": _st({F: {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                "h.0.attn.c_proj.weight": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}},
                               b"\0" * 24),
    "negative-shape": _st({F: {"dtype": "F32", "shape": [-1, 64], "data_offsets": [0, 256]}}, b"\0" * 256),
    "mismatched-shape": _st({F: {"dtype": "F32", "shape": [3, 3], "data_offsets": [0, 16]}}, b"\0" * 16),
    "list-header": _st([1, 2, 3]),
    "string-offsets": _st({F: {"dtype": "F32", "shape": [2], "data_offsets": ["0", "8"]}}, b"\0" * 8),
    "unknown-dtype": _st({F: {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
    "not-json": _st(b"{nope"),
    "shorter-than-8-bytes": b"\1\2",
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_corrupt_safetensors_header_is_one_error_everywhere(base, tmp_path, case) -> None:
    d = _copy(base, tmp_path)
    (d / "model.safetensors").write_bytes(HEADERS[case])
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        layer_matrices(d)  # own reader: validated before any allocation (2^62 used to be a MemoryError)
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        load_model(d)  # through transformers (used to be a SafetensorError traceback)
    res = _cli(["steer", str(d), "--eigvec", "0", "--gain", "1"])
    assert res.exit_code == 2 and "not a valid safetensors file" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1


def test_valid_header_still_reads_the_same_numbers(base) -> None:
    from safetensors import safe_open

    from steerformer.loading import SafetensorsReader

    r = SafetensorsReader(base)
    with safe_open(base / "model.safetensors", "pt") as f:
        for k in f.keys():
            assert torch.equal(r.get(k), f.get_tensor(k))
    r.close()


# ---- pickled weights are never unpickled ------------------------------------------------------
class _Evil:
    def __init__(self, sentinel: str) -> None:
        self.sentinel = sentinel

    def __reduce__(self):
        return (Path.touch, (Path(self.sentinel),))


def _bin_checkpoint(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    d = tmp_path / "binmodel"
    make_model("gpt2-base", dtype=torch.float32).config.save_pretrained(d)
    sentinel = tmp_path / "code-ran"
    if kind == "malicious":
        (d / "pytorch_model.bin").write_bytes(pickle.dumps({"h.0.attn.c_attn.weight": _Evil(str(sentinel))}))
    elif kind == "malicious-torch-zip":
        torch.save({"x": _Evil(str(sentinel))}, d / "pytorch_model.bin")
    else:
        (d / "pytorch_model.bin").write_bytes(b"\x80\x04garbage that is no pickle" * 4)
    return d, sentinel


@pytest.mark.parametrize("kind", ["malicious", "malicious-torch-zip", "corrupt"])
def test_pickled_bin_is_refused_and_never_unpickled(tmp_path, kind) -> None:
    d, sentinel = _bin_checkpoint(tmp_path, kind)
    with pytest.raises(CheckpointError, match="not a plain tensor file.*will not unpickle"):
        layer_matrices(d)
    res = _cli(["steer", str(d), "--eigvec", "0", "--gain", "1"])
    assert res.exit_code == 2 and "will not unpickle" in res.output
    assert not sentinel.exists()  # the pickle's code never ran


# ---- other input mistakes ---------------------------------------------------------------------
def test_revision_with_a_local_folder_is_refused(base) -> None:
    res = _cli(["analyze", str(base), "--revision", "main", "--spectra-only", "--no-plots"])
    assert res.exit_code == 2 and "revision='main'" in res.output and "local folder" in res.output


def test_api_spectra_of_a_model_name(base) -> None:
    import steerformer as sf

    with pytest.raises(InvalidArgumentError, match="not a model name.*analyze"):
        sf.spectra("gpt2")
    with pytest.raises(InvalidArgumentError, match="not a model name"):
        sf.spectra(base)


@pytest.mark.parametrize("layers, words", [
    ([], "at least one layer"), ([0, 0, 0], "layer 0 is named more than once"),
    ([-1, 1], "layer 1 is named more than once"),
], ids=["empty", "duplicates", "negative-alias-duplicate"])
def test_api_analyze_layer_selection(base, layers, words) -> None:
    import steerformer as sf

    with pytest.raises(InvalidArgumentError, match=words):
        sf.analyze(base, layers=layers, stats=False)


def test_api_steer_with_out_of_vocabulary_prompt_ids() -> None:
    import steerformer as sf

    model = make_model("gpt2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = torch.tensor([[1, 2, 10_000]])
    with pytest.raises(InvalidArgumentError, match=r"prompts=.*\[0, 100\]"):
        sf.steer(model, np.ones(64), strength=1.0, prompts=bad)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_auto_map_code_in_a_checkpoint_never_runs(base, tmp_path) -> None:
    d = _copy(base, tmp_path)
    sentinel = tmp_path / "remote-code-ran"
    (d / "evil.py").write_text(f"from pathlib import Path\nPath({str(sentinel)!r}).touch()\n"
                               "from transformers import GPT2Config as EvilConfig, GPT2Model as EvilModel\n")
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    (d / "config.json").write_text(json.dumps(cfg))
    ref = layer_matrices(base).matrices
    torch.testing.assert_close(layer_matrices(d).matrices, ref, rtol=0, atol=0)
    load_model(d)
    res = _cli(["steer", str(d), "--eigvec", "0", "--gain", "1"])
    assert res.exit_code == 0, res.output
    assert not sentinel.exists()


@pytest.mark.parametrize("cmd", ["verify", "unsteer"])
@pytest.mark.parametrize("case", ["header-len-2^62", "truncated-model-safetensors"])
def test_corrupt_weights_of_a_steered_checkpoint_are_one_line(tmp_path, cmd, case) -> None:
    from steerformer.steering import save_steered, steer

    model = make_model("gpt2")
    steer(model, torch.ones(64, dtype=torch.float64), strength=5.0, report=False)
    s = save_steered(model, tmp_path / "s")
    f = s / "model.safetensors"
    f.write_bytes(HEADERS["header-len-2^62"] if case == "header-len-2^62" else f.read_bytes()[: f.stat().st_size // 2])
    args = [cmd, str(s)] + (["--out", str(tmp_path / "o")] if cmd == "unsteer" else [])
    res = _cli(args)  # used to be a SafetensorError traceback
    assert res.exit_code in (1, 2) and "model.safetensors is not a valid safetensors file" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
