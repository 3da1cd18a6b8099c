"""Issue 9, steering internals: unsteer checks the originals before writing anything, steer refuses
non-finite results (and directions whose norm overflows), verify catches tampering anywhere in the
checkpoint and names it, broken provenance is one clear line with exit 2. One test id per case."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from steerformer_cli.main import app
from typer.testing import CliRunner
from transformers import BertModel

from steerformer.errors import CheckpointError, SteerformerError
from steerformer.steering import save_steered, steer, steering_of, unsteer_checkpoint, verify_checkpoint
from steerformer.steering.common import METADATA_KEY, add_safetensors_metadata, read_safetensors_metadata

from .tiny_models import make_model

runner = CliRunner()


def _unit(d: int, seed: int) -> torch.Tensor:
    v = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return v / v.norm()


@pytest.fixture(scope="module")
def steered_dir(tmp_path_factory) -> Path:
    """A bert checkpoint steered twice (a chain), saved once; tests copy it before damaging it."""
    tmp = tmp_path_factory.mktemp("hardening_steering")
    model = make_model("bert", dtype=torch.float32)
    model.save_pretrained(tmp / "base")
    steer(model, _unit(64, 1), gain=2.0, solve="exact", report=False)
    steer(model, _unit(64, 2), gain=1.0, solve="exact", layer=0, report=False)
    return save_steered(model, tmp / "steered")


@pytest.fixture
def ckpt(steered_dir: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(steered_dir, tmp_path / "ckpt"))


def _one_line_exit2(res) -> None:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.replace("\r", "\n").splitlines() if ln.strip() and "Loading weights" not in ln]
    assert "Traceback" not in res.output and len(lines) == 1 and lines[0].startswith("error:"), res.output


# ---- unsteer checks the originals before writing anything ----------------------------------------
def _rewrite_originals(ckpt: Path, change) -> None:
    path = ckpt / "steerformer" / "original.safetensors"
    t = load_file(str(path))
    change(t)
    save_file(t, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize("case", ["unsteer-original-extra-key", "unsteer-original-zeroed-layer",
                                  "unsteer-original-missing-key"])
def test_unsteer_checks_every_original_before_writing(ckpt: Path, tmp_path: Path, case: str) -> None:
    names = sorted(load_file(str(ckpt / "steerformer" / "original.safetensors")))
    if case == "unsteer-original-extra-key":
        _rewrite_originals(ckpt, lambda t: t.__setitem__("embeddings.word_embeddings.weight", torch.zeros(101, 64)))
        named = "embeddings.word_embeddings.weight"
    elif case == "unsteer-original-zeroed-layer":
        _rewrite_originals(ckpt, lambda t: t.__setitem__(names[0], torch.zeros_like(t[names[0]])))
        named = names[0]
    else:
        _rewrite_originals(ckpt, lambda t: t.pop(names[-1]))
        named = names[-1]
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        unsteer_checkpoint(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    res = runner.invoke(app, ["unsteer", str(ckpt), "--out", str(tmp_path / "out2")])
    _one_line_exit2(res)
    assert named in res.output and not (tmp_path / "out2").exists()


# ---- steer refuses non-finite results ---------------------------------------------------------------
@pytest.mark.parametrize("gain,report,what", [(1e30, True, "model outputs"), (1e45, False, "weights")],
                         ids=["steer-huge-gain-nan-outputs", "steer-huge-gain-inf-weights"])
def test_steer_huge_gain_is_refused_and_the_model_restored(gain: float, report: bool, what: str) -> None:
    model = make_model("gpt2", dtype=torch.float32)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    with pytest.raises(SteerformerError, match=f"non-finite {what}"):
        steer(model, _unit(64, 1), gain=gain, solve="exact", report=report)
    assert all(torch.equal(v, before[k]) for k, v in model.named_parameters())
    assert steering_of(model) is None
    # a steered model steered again with a huge gain keeps its first edit, nothing else
    steer(model, _unit(64, 2), gain=1.0, solve="exact", report=False)
    once = {k: v.detach().clone() for k, v in model.named_parameters()}
    with pytest.raises(SteerformerError, match="non-finite"):
        steer(model, _unit(64, 1), gain=gain, solve="exact", report=report)
    assert all(torch.equal(v, once[k]) for k, v in model.named_parameters())
    assert len(steering_of(model).records) == 1


def test_steer_strength_1e308_is_one_clear_error() -> None:  # id: steer-strength-1e308 (was ArpackError)
    model = make_model("gpt2", dtype=torch.float32)
    with pytest.raises(SteerformerError, match=r"strength=1e\+308"):
        steer(model, _unit(64, 1), strength=1e308, solve="exact")
    assert steering_of(model) is None


def test_cli_steer_huge_gain_saves_nothing(tmp_path: Path) -> None:
    make_model("gpt2", dtype=torch.float32).save_pretrained(tmp_path / "base")
    np.save(tmp_path / "u.npy", _unit(64, 1).numpy())
    res = runner.invoke(app, ["steer", str(tmp_path / "base"), "--direction", str(tmp_path / "u.npy"),
                              "--gain", "1e30", "--solve", "exact", "--out", str(tmp_path / "out")])
    _one_line_exit2(res)
    assert "non-finite" in res.output and not (tmp_path / "out").exists()


def test_steer_direction_entries_1e308_normalize_without_overflow() -> None:
    model = make_model("bert", dtype=torch.float64)
    before = model.encoder.layer[1].attention.output.dense.weight.detach().clone()
    raw = _unit(64, 4).numpy() * 1e308 / np.abs(_unit(64, 4).numpy()).max()  # max entry 1e308
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.linalg.norm(raw))  # the naive norm overflows
    rec = steer(model, raw, gain=1.0, solve="exact", report=False)
    u = np.asarray(rec.direction)
    assert np.isfinite(u).all() and abs(np.linalg.norm(u) - 1) < 1e-12
    assert np.allclose(u, _unit(64, 4).numpy(), atol=1e-12)
    assert not torch.equal(model.encoder.layer[1].attention.output.dense.weight, before)


# ---- verify catches tampering ------------------------------------------------------------------------
def _flip_bit(path: Path, key: str, byte: int = 0) -> None:
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        pos = 8 + n + header[key]["data_offsets"][0] + byte
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ 1]))


def _failed(res: dict) -> list[str]:
    return [f"{c['name']}: {c['detail']}" for c in res["checks"] if not c["ok"]]


@pytest.mark.parametrize("key", ["encoder.layer.0.intermediate.dense.weight", "encoder.layer.1.output.LayerNorm.weight",
                                 "embeddings.word_embeddings.weight", "encoder.layer.1.attention.output.dense.weight"],
                         ids=["verify-flipped-bit-mlp", "verify-flipped-bit-layernorm", "verify-flipped-bit-embedding",
                              "verify-flipped-bit-edited-weight"])
def test_verify_names_a_flipped_bit_anywhere(ckpt: Path, key: str) -> None:
    _flip_bit(ckpt / "model.safetensors", key, byte=4 * 64 * 3 + 1 if "embedding" in key else 1)
    res = verify_checkpoint(ckpt)
    assert not res["ok"] and any(key in f for f in _failed(res)), _failed(res)
    out = runner.invoke(app, ["verify", str(ckpt)])
    assert out.exit_code == 1 and key in out.output


@pytest.mark.parametrize("field,value", [("gain", 3.0), ("strength", 9.0), ("layer", 0), ("model_id", "someone/else"),
                                         ("model_commit", "0" * 40)],
                         ids=["verify-record-gain", "verify-record-strength", "verify-record-layer",
                              "verify-record-model_id", "verify-record-model_commit"])
def test_verify_names_a_rewritten_record_field(ckpt: Path, field: str, value) -> None:
    path = ckpt / "steerformer" / "record.json"
    payload = json.loads(path.read_text())
    payload["records"][0][field] = value
    path.write_text(json.dumps(payload, indent=1))
    res = verify_checkpoint(ckpt)
    failed = _failed(res)
    assert not res["ok"]
    assert any(f.startswith("record hash") for f in failed)
    assert any(f"records[0].{field}" in f for f in failed), failed


def test_verify_compares_the_metadata_copy(ckpt: Path) -> None:  # id: verify-metadata-copy-differs
    st = ckpt / "model.safetensors"
    meta = json.loads(read_safetensors_metadata(st)[METADATA_KEY])
    meta["records"][1]["gain"] = 123.0
    add_safetensors_metadata(st, {METADATA_KEY: json.dumps(meta)})
    res = verify_checkpoint(ckpt)
    assert not res["ok"] and any("records[1].gain" in f for f in _failed(res)), _failed(res)


def test_verify_recomputes_the_edit_from_the_record(ckpt: Path) -> None:  # id: verify-edit-vector-changed
    """A consistent forgery of the record (hash recomputed, metadata copied) still fails: the edit
    replayed from the originals does not give the saved weights."""
    from steerformer.steering.common import payload_sha256

    path = ckpt / "steerformer" / "record.json"
    payload = json.loads(path.read_text())
    payload["records"][1]["edits"][0]["a"][0] += 1.0
    payload["record_sha256"] = payload_sha256(payload)
    path.write_text(json.dumps(payload, indent=1))
    add_safetensors_metadata(ckpt / "model.safetensors", {METADATA_KEY: json.dumps(payload, separators=(",", ":"))})
    res = verify_checkpoint(ckpt)
    failed = _failed(res)
    assert not res["ok"] and any(f.startswith("edits recomputed") for f in failed), failed
    assert [f for f in failed if not f.startswith("edits recomputed")] == []


def test_verify_intact_chain_is_ok(ckpt: Path) -> None:
    res = verify_checkpoint(ckpt)
    assert res["ok"], _failed(res)
    assert any(c["name"] == "tensor hashes" and "match" in c["detail"] for c in res["checks"])


# ---- broken provenance: one line, exit 2 ----------------------------------------------------------------
def _break(ckpt: Path, case: str) -> None:
    rec = ckpt / "steerformer" / "record.json"
    if case == "record-not-json":
        rec.write_text("{ not json")
    elif case == "record-missing-field":
        p = json.loads(rec.read_text())
        del p["records"][0]["gain"]
        rec.write_text(json.dumps(p))
    elif case == "records-empty":
        p = json.loads(rec.read_text())
        p["records"] = []
        rec.write_text(json.dumps(p))
    elif case == "unknown-module":
        p = json.loads(rec.read_text())
        p["records"][0]["module"] = p["records"][0]["edits"][0]["module"] = "encoder.layer.9.nope.weight"
        rec.write_text(json.dumps(p))
    elif case == "truncated-original":
        f = ckpt / "steerformer" / "original.safetensors"
        f.write_bytes(f.read_bytes()[:-100])
    elif case == "truncated-model":
        f = ckpt / "model.safetensors"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


CASES = ["record-not-json", "record-missing-field", "records-empty", "unknown-module", "truncated-original",
         "truncated-model"]


@pytest.mark.parametrize("case", CASES)
def test_broken_provenance_is_one_line_exit_2(ckpt: Path, tmp_path: Path, case: str) -> None:
    _break(ckpt, case)
    with pytest.raises(CheckpointError):
        verify_checkpoint(ckpt)
    for args in (["verify", str(ckpt)], ["unsteer", str(ckpt), "--out", str(tmp_path / "o")]):
        res = runner.invoke(app, args)
        _one_line_exit2(res)
    assert not (tmp_path / "o").exists()


def test_plain_load_of_a_broken_chain_warns_and_loads(ckpt: Path, caplog) -> None:
    import steerformer as sf

    _break(ckpt, "record-missing-field")
    model = sf.load_model(ckpt)
    assert isinstance(model, BertModel) and steering_of(model) is None
    assert "not attached" in caplog.text


@pytest.mark.parametrize("case", ["verify-config-changed", "verify-extra-file", "verify-config-unreadable",
                                  "verify-header-shape-changed"])
def test_verify_accounts_for_every_file(ckpt: Path, case: str) -> None:
    if case == "verify-config-changed":
        cfg = json.loads((ckpt / "config.json").read_text())
        cfg["layer_norm_eps"] = 0.5
        (ckpt / "config.json").write_text(json.dumps(cfg))
        named = "config.json"
    elif case == "verify-extra-file":
        (ckpt / "payload.py").write_text("print('hi')")
        named = "payload.py"
    elif case == "verify-config-unreadable":
        (ckpt / "config.json").write_text("{}")  # no model_type: the model cannot be built
        named = "config.json"
    else:  # same bytes, another shape in the header: (64, 64) -> (32, 128)
        st = ckpt / "model.safetensors"
        raw = st.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        key = "encoder.layer.0.intermediate.dense.weight"
        header[key]["shape"] = header[key]["shape"][::-1]
        new = json.dumps(header, separators=(",", ":")).encode()
        new += b" " * (-len(new) % 8)
        st.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])
        named = key
    res = verify_checkpoint(ckpt)  # also when the model can no longer be built: the cause is named
    assert not res["ok"] and any(named in f for f in _failed(res)), _failed(res)
