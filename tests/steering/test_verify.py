"""A saved chain checked against itself: unsteer checks the originals before writing anything,
verify names tampering anywhere in the folder (a flipped bit, a rewritten field, the metadata
copy, every file), and broken provenance is one line."""

from __future__ import annotations

import json
from pathlib import Path
import struct

import pytest
from safetensors.torch import load_file, save_file
import torch
from transformers import BertModel
from typer.testing import CliRunner

from steerformer.errors import CheckpointError
from steerformer.steering import save_steered, steer, steering_of, unsteer_checkpoint, verify_checkpoint
from steerformer.steering.common import add_safetensors_metadata, METADATA_KEY, read_safetensors_metadata
from steerformer_cli.main import app

from tests.conftest import unit_vector
from tests.models import make_model


runner = CliRunner()


@pytest.fixture(scope="module")
def steered_dir(tmp_path_factory) -> Path:
    """A bert checkpoint steered twice (a chain), saved once; tests copy it before damaging it."""
    tmp = tmp_path_factory.mktemp("hardening_steering")
    model = make_model("bert", dtype=torch.float32)
    model.save_pretrained(tmp / "base")
    steer(model, unit_vector(64, 1), gain=2.0, solve="exact", report=False)
    steer(model, unit_vector(64, 2), gain=1.0, solve="exact", layer=0, report=False)
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
