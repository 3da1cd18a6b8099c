"""A GGUF's metadata is checked against its tensors before anything is built from it, on the lazy
path (analyze) and before transformers' full load (steer) alike: a block count, width or head
count that lies, a value of the wrong type, a tensor whose dims lie with the same byte count, and a
block count of 10**6 in a small file are each one line (exit 2); an error while a tensor is
memory-mapped (a NaN weight) reaches the user as itself, not as ``BufferError``; the conversion
cache's hash index and folders cannot point outside the cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("gguf")

from tests.formats.gguf_sources import _byte_tokens, add_byte_tokenizer  # noqa: E402

D, FF, HEADS, KV, BLOCKS = 64, 96, 4, 2, 3


def write_gguf(path: Path, *, meta: dict | None = None, drop: tuple = (), shapes: dict | None = None,
               nan_in: str | None = None) -> Path:
    """A tiny Llama GGUF (random weights of the right shapes) with metadata ``meta`` overriding the
    true values ({key: (kind, value)}, kind a GGUFWriter ``add_<kind>``; value None drops the key),
    tensors ``drop``ped, ``shapes`` lied about (same bytes), and a NaN in tensor ``nan_in``."""
    import gguf

    true = {"llama.context_length": ("uint32", 128), "llama.embedding_length": ("uint32", D),
            "llama.block_count": ("uint32", BLOCKS), "llama.feed_forward_length": ("uint32", FF),
            "llama.rope.dimension_count": ("uint32", D // HEADS), "llama.attention.head_count": ("uint32", HEADS),
            "llama.attention.head_count_kv": ("uint32", KV), "llama.vocab_size": ("uint32", 300),
            "llama.attention.layer_norm_rms_epsilon": ("float32", 1e-5), "llama.rope.freq_base": ("float32", 1e4)}
    true.update(meta or {})
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    for key, (kind, value) in true.items():
        if value is not None:
            getattr(w, f"add_{kind}")(key, value)
    add_byte_tokenizer(w, _byte_tokens()[:-2] + ["Ġt", "he"])  # the merges' results are tokens too
    rng = np.random.default_rng(0)
    dh = D // HEADS
    tensors = {"token_embd.weight": (300, D)}
    for i in range(BLOCKS):
        for name, shape in (("attn_norm", (D,)), ("attn_q", (D, D)), ("attn_k", (KV * dh, D)),
                            ("attn_v", (KV * dh, D)), ("attn_output", (D, D)), ("ffn_norm", (D,)),
                            ("ffn_gate", (FF, D)), ("ffn_up", (FF, D)), ("ffn_down", (D, FF))):
            tensors[f"blk.{i}.{name}.weight"] = shape
    tensors["output_norm.weight"] = (D,)
    for name, shape in tensors.items():
        if name in drop:
            continue
        a = (rng.normal(size=shape) * 0.1 + (1.0 if len(shape) == 1 else 0.0)).astype(np.float32)
        if name == nan_in:
            a.reshape(-1)[3] = np.nan
        if shapes and name in shapes:
            a = a.reshape(shapes[name])
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _cli(args) -> object:
    from steerformer_cli.main import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output and "BufferError" not in res.output, res.output
    return res


def _one_line(res, *words) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.output
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


LIES = {
    "block_count-6-over-3-blocks": (dict(meta={"llama.block_count": ("uint32", 6)}), ["block_count=6", "blocks 0-2"]),
    "block_count-2-over-3-blocks": (dict(meta={"llama.block_count": ("uint32", 2)}), ["block_count=2", "blocks 0-2"]),
    "block_count-10^6": (dict(meta={"llama.block_count": ("uint32", 10**6)}), ["block_count=1000000"]),
    "block_count-missing": (dict(meta={"llama.block_count": ("uint32", None)}), ["block_count"]),
    "embedding_length-128-over-64": (dict(meta={"llama.embedding_length": ("uint32", 128)}), ["embedding_length=128"]),
    "head_count-0": (dict(meta={"llama.attention.head_count": ("uint32", 0)}), ["head_count=0"]),
    "head_count-3-odd": (dict(meta={"llama.attention.head_count": ("uint32", 3)}), ["head_count=3"]),
    "head_count-float": (dict(meta={"llama.attention.head_count": ("float32", 4.0)}), ["head_count=4.0"]),
    "head_count-string": (dict(meta={"llama.attention.head_count": ("string", "4")}), ["head_count='4'"]),
    "head_count_kv-3": (dict(meta={"llama.attention.head_count_kv": ("uint32", 3)}), ["head_count_kv=3"]),
    "block_count-negative-int32": (dict(meta={"llama.block_count": ("int32", -3)}), ["block_count=-3"]),
    "value-dims-lie-same-bytes": (dict(shapes={"blk.1.attn_v.weight": (D, KV * D // HEADS)}), ["blk.1.attn_v.weight"]),
    "ffn-dims-lie": (dict(shapes={"blk.0.ffn_up.weight": (FF // 2, 2 * D)}), ["blk.0.ffn_up.weight"]),
    "missing-value-tensor": (dict(drop=("blk.2.attn_v.weight",)), ["blk.2.attn_v.weight"]),
    "alignment-string": (dict(meta={"general.alignment": ("string", "abc")}), ["general.alignment='abc'"]),
    "alignment-0": (dict(meta={"general.alignment": ("uint32", 0)}), ["general.alignment=0"]),
    "alignment-float": (dict(meta={"general.alignment": ("float32", 32.0)}), ["general.alignment=32.0"]),
}


@pytest.mark.parametrize("command", ["analyze", "steer"])
@pytest.mark.parametrize("case", list(LIES))
def test_gguf_metadata_that_lies_is_one_line(tmp_path, monkeypatch, case, command) -> None:
    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    kw, words = LIES[case]
    f = write_gguf(tmp_path / "m.gguf", **kw)
    args = {"analyze": ["analyze", f, "--spectra-only", "--no-plots", "--out", tmp_path / "o"],
            "steer": ["steer", f, "--eigvec", "0", "--gain", "1", "--out", tmp_path / "o"]}[command]
    _one_line(_cli(args), str(f), *words)
    assert not (tmp_path / "o").exists()
    assert not (tmp_path / "cache" / "gguf").exists() or \
        not [p for p in (tmp_path / "cache" / "gguf").iterdir() if p.is_dir()]  # nothing converted


def test_a_huge_block_count_is_refused_before_the_name_map(tmp_path) -> None:
    """10**6 blocks claimed by a small file: refused from the header alone (the gguf package's name
    map for 10**6 blocks took 4.5 GB)."""
    import tracemalloc

    from steerformer.errors import CheckpointError
    from steerformer.loading import open_source

    f = write_gguf(tmp_path / "m.gguf", meta={"llama.block_count": ("uint32", 10**6)})
    tracemalloc.start()
    with pytest.raises(CheckpointError, match="block_count=1000000"):
        open_source(f)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 400 << 20, peak  # imports included; the name map alone was 4.5 GB


def test_an_honest_gguf_still_loads_on_both_paths(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    f = write_gguf(tmp_path / "m.gguf")
    assert _cli(["analyze", f, "--spectra-only", "--no-plots", "--out", tmp_path / "a"]).exit_code == 0
    res = _cli(["steer", f, "--eigvec", "0", "--gain", "1", "--out", tmp_path / "s"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("command", ["analyze", "steer"])
def test_a_nan_weight_is_named_in_its_tensor_and_file(tmp_path, monkeypatch, command) -> None:
    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    f = write_gguf(tmp_path / "m.gguf", nan_in="blk.1.attn_v.weight")
    args = {"analyze": ["analyze", f, "--spectra-only", "--no-plots", "--out", tmp_path / "o"],
            "steer": ["steer", f, "--layer", "1", "--eigvec", "0", "--gain", "1", "--out", tmp_path / "o"]}[command]
    line = _one_line(_cli(args), str(f), "non-finite")
    assert "v_proj" in line or "attn_v" in line, line
    assert "gain" not in line


def test_an_error_while_a_tensor_is_mapped_is_the_real_error(tmp_path) -> None:
    from steerformer.errors import CheckpointError
    from steerformer.loading import open_source

    src = open_source(write_gguf(tmp_path / "m.gguf", nan_in="blk.0.attn_v.weight"))
    with pytest.raises(CheckpointError, match="non-finite"):  # used to be BufferError from closing the map
        with src.tensors() as get:
            get("layers.0.self_attn.v_proj.weight")


@pytest.mark.parametrize("index", ["[1, 2]", "null", '"x"', "[" * 100_000 + "]" * 100_000, "fifo", "outside"])
def test_a_broken_hash_cache_is_ignored_and_rebuilt(tmp_path, monkeypatch, index) -> None:
    from steerformer.gguf_source import file_sha256

    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    f = write_gguf(tmp_path / "m.gguf")
    true = hashlib.sha256(f.read_bytes()).hexdigest()
    idx = tmp_path / "cache" / "gguf" / "hashes.json"
    idx.parent.mkdir(parents=True)
    if index == "fifo":
        os.mkfifo(idx)
    elif index == "outside":  # an entry that would name a folder outside the cache
        st = f.stat()
        stamp = f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
        idx.write_text(json.dumps({stamp: "../../../../etc"}))
    else:
        idx.write_text(index)
    assert file_sha256(f) == true
    if index != "fifo":
        assert json.loads(idx.read_text()) != index


def test_a_cache_folder_that_links_outside_is_refused(tmp_path, monkeypatch) -> None:
    from steerformer.errors import CheckpointError
    from steerformer.gguf_source import SOURCE_FILE, converted_checkpoint

    monkeypatch.setenv("STEERFORMER_CACHE", str(tmp_path / "cache"))
    f = write_gguf(tmp_path / "m.gguf")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / SOURCE_FILE).write_text("{}")
    (tmp_path / "cache" / "gguf").mkdir(parents=True)
    (tmp_path / "cache" / "gguf" / hashlib.sha256(f.read_bytes()).hexdigest()).symlink_to(outside)
    with pytest.raises(CheckpointError, match="outside the cache"):
        converted_checkpoint(f)
