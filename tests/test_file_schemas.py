"""Every file steerformer reads back has one schema (steerformer/schemas.py): a property test that
replaces each field of each file, in turn, by every kind of JSON value and checks that reading it
either works or fails with one line naming the file and the field — never a traceback. And a
Direction folder is read only as regular files inside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from steerformer.collapse.store import RUN_FILE, RunStore
from steerformer.errors import SteerformerError
from steerformer.formats import read_control_vector
from steerformer.steering import SteeringRecord, steer
from steerformer.steering.direction import Direction, read_direction
from tests.conftest import unit_vector
from tests.models import make_model

#: Every JSON type, and the sizes that broke readers before (a huge string, a long list).
JSON_VALUES = {"null": None, "true": True, "zero": 0, "negative": -7, "big-int": 10 ** 30, "float": 1.5,
               "nan": float("nan"), "string": "x", "empty-string": "", "huge-string": "x" * 300_000,
               "list": [1, "a"], "empty-list": [], "object": {"a": 1}, "empty-object": {}}


def paths_of(doc, prefix=()):
    """Every field path of a JSON document (object keys; the first item of a list)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from paths_of(v, prefix + (k,))
    elif isinstance(doc, list) and doc and isinstance(doc[0], (dict, list)):
        yield prefix + (0,)
        yield from paths_of(doc[0], prefix + (0,))


def replaced(doc, path, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


def read_or_one_line(read, where: str, field: str) -> None:
    """``read()`` works, or raises a SteerformerError of one line naming ``where``; a schema error also
    names ``field``. Any other exception fails the test (it would be a traceback)."""
    try:
        read()
    except SteerformerError as exc:
        text = str(exc)
        assert "\n" not in text and where in text, text
        if "field " in text:
            assert field in text, (field, text)


def check_every_field(doc, write, read, where) -> int:
    n = 0
    for path in [()] + list(paths_of(doc)):
        for value in JSON_VALUES.values():
            write(value if path == () else replaced(doc, path, value))
            read_or_one_line(read, where, ".".join(str(p) for p in path[-1:]))
            n += 1
    return n


# ---- direction.json ----------------------------------------------------------------------------------
@pytest.fixture
def direction_folder(tmp_path) -> Path:
    d = Direction({1: torch.randn(8, generator=torch.Generator().manual_seed(0))}, model_id="tiny", method="mean-diff",
                  prompts_sha256={"positive": "0" * 64}, metadata={"model_hint": "llama", "scale": 2.0})
    return d.save(tmp_path / "dir", card=False)


def test_every_field_of_direction_json_is_typed(direction_folder) -> None:
    meta = direction_folder / "direction.json"
    doc = json.loads(meta.read_text())
    n = check_every_field(doc, lambda v: meta.write_text(json.dumps(v)), lambda: read_direction(direction_folder),
                          "direction")
    assert n > 150


def test_a_wrong_type_in_direction_json_names_the_file_and_the_field(direction_folder) -> None:
    meta = direction_folder / "direction.json"
    doc = json.loads(meta.read_text())
    for path, words in [(("sha256",), "field sha256"), (("metadata", "model_hint"), "field metadata.model_hint"),
                        (("prompts_sha256",), "field prompts_sha256"), (("metadata",), "field metadata")]:
        meta.write_text(json.dumps(replaced(doc, path, [1, 2])))
        with pytest.raises(SteerformerError) as exc:
            read_direction(direction_folder)
        assert str(meta) in str(exc.value) and words in str(exc.value), str(exc.value)
    meta.write_text(json.dumps([doc]))
    with pytest.raises(SteerformerError, match="the top level"):
        read_direction(direction_folder)


def test_a_vectors_key_that_is_no_ascii_layer_number_is_one_line(direction_folder) -> None:
    from safetensors.torch import save_file

    save_file({"layer.²": torch.ones(8)}, str(direction_folder / "direction.safetensors"))
    with pytest.raises(SteerformerError, match="layer.N") as exc:
        read_direction(direction_folder)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("name", ["direction.json", "direction.safetensors"])
def test_a_direction_file_is_never_read_through_a_link_out_of_its_folder(direction_folder, tmp_path, name) -> None:
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    (direction_folder / name).rename(outside)
    (direction_folder / name).symlink_to(outside)
    with pytest.raises(SteerformerError, match="outside the direction folder") as exc:
        read_direction(direction_folder)
    assert "\n" not in str(exc.value)


def test_a_direction_file_that_is_a_fifo_is_named_a_fifo(direction_folder) -> None:
    (direction_folder / "direction.json").unlink()
    os.mkfifo(direction_folder / "direction.json")
    with pytest.raises(SteerformerError, match="a FIFO"):
        read_direction(direction_folder)


# ---- a steering record -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def record_doc():
    rec = steer(make_model("gpt2"), unit_vector(64, 7), measure="dynamics", gain=0.5)
    return rec.to_dict()


def test_every_field_of_a_record_is_typed(record_doc, tmp_path) -> None:
    path = tmp_path / "record.json"
    doc = {k: v for k, v in record_doc.items() if k not in ("direction", "target", "left")}  # long float lists
    doc.update(direction=[1.0, 0.0], target=[1.0, 0.0], left=[1.0, 0.0])
    n = check_every_field(doc, lambda v: path.write_text(json.dumps(v)), lambda: SteeringRecord.from_json(path),
                          "record.json")
    assert n > 500


def test_a_wrong_type_in_a_record_names_the_field(record_doc, tmp_path) -> None:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(replaced(record_doc, ("edits", 0, "layer"), "three")))
    with pytest.raises(SteerformerError) as exc:
        SteeringRecord.from_json(path)
    assert "field edits.0.layer" in str(exc.value) and str(path) in str(exc.value)


# ---- a control vector's metadata ------------------------------------------------------------------------
def write_cv(path, layer_count=("uint32", 2), model_hint=("string", "llama")):
    w = gguf.GGUFWriter(str(path), "controlvector")
    for key, (kind, value) in (("controlvector.layer_count", layer_count), ("controlvector.model_hint", model_hint)):
        if kind == "array":
            w.add_array(key, value)
        elif kind is not None:
            getattr(w, f"add_{kind}")(key, value)
    for n in (1, 2):
        w.add_tensor(f"direction.{n}", np.ones(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


GGUF_VALUES = [("string", "2"), ("string", ""), ("array", [1, 2]), ("float32", 2.0), ("bool", True), ("int32", -1),
               ("uint64", 10 ** 12), ("string", "x" * 300_000)]


@pytest.mark.parametrize("kind, value", GGUF_VALUES)
@pytest.mark.parametrize("key", ["layer_count", "model_hint"])
def test_every_control_vector_key_is_typed(tmp_path, key, kind, value) -> None:
    path = write_cv(tmp_path / "cv.gguf", **{key: (kind, value)})
    read_or_one_line(lambda: read_control_vector(path), "cv.gguf", f"controlvector.{key}")


def test_a_layer_count_that_is_a_string_names_the_key(tmp_path) -> None:
    path = write_cv(tmp_path / "cv.gguf", layer_count=("string", "2"))
    with pytest.raises(SteerformerError, match="field controlvector.layer_count"):
        read_control_vector(path)


# ---- a collapse run's run.json --------------------------------------------------------------------------
def test_every_field_of_run_json_is_typed(tmp_path) -> None:
    store = RunStore(tmp_path / "run")
    store.write_run({"options": {"passes": 3}, "meta": {"model": "m"}})
    store._integrity_rec()["passes"].append("0" * 64)  # noqa: SLF001 - a run with one pass recorded
    store._flush()  # noqa: SLF001
    path = tmp_path / "run" / RUN_FILE
    doc = json.loads(path.read_text())
    n = check_every_field(doc, lambda v: path.write_text(json.dumps(v)), lambda: RunStore(tmp_path / "run").read_run(),
                          "run.json")
    assert n > 100
