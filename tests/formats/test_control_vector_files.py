"""llama.cpp control vectors: what the file holds (read back with the gguf package's own reader),
that llama.cpp's and repeng's files read back at the same layers, and one-line refusals."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from steerformer.errors import InvalidArgumentError
from steerformer.formats import ControlVector, read_control_vector, write_control_vector

from .gguf_sources import tiny_llama, write_llama_source


def _write_raw(path, tensors: dict, *, arch="controlvector", layer_count=None, int32=False, hint="llama"):
    """A control-vector GGUF written directly with the gguf writer, as llama.cpp's
    cvector-generator (int32 layer_count) or repeng's export_gguf (uint32) do."""
    w = gguf.GGUFWriter(str(path), arch)
    if arch == "controlvector":
        w.add_string("controlvector.model_hint", hint)
        count = len(tensors) if layer_count is None else layer_count
        (w.add_int32 if int32 else w.add_uint32)("controlvector.layer_count", count)
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_written_file_has_llama_cpp_keys_names_and_dtypes(tmp_path) -> None:
    g = torch.Generator().manual_seed(0)
    vectors = {n: torch.randn(48, generator=g) for n in (1, 2, 5)}
    path = write_control_vector(tmp_path / "cv.gguf", vectors, model_hint="llama")
    reader = gguf.GGUFReader(path)
    assert reader.get_field("general.architecture").contents() == "controlvector"
    assert reader.get_field("controlvector.model_hint").contents() == "llama"
    assert reader.get_field("controlvector.layer_count").contents() == 3
    assert [t.name for t in reader.tensors] == ["direction.1", "direction.2", "direction.5"]
    for t in reader.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32 and t.shape.tolist() == [48]
        n = int(t.name.split(".")[1])
        np.testing.assert_array_equal(np.asarray(t.data), vectors[n].numpy().astype(np.float32))


def test_round_trip_keeps_each_vector_at_its_layer(tmp_path) -> None:
    g = torch.Generator().manual_seed(1)
    cv = ControlVector({n: torch.randn(16, generator=g, dtype=torch.float64) for n in (3, 1, 2)}, "qwen2")
    back = ControlVector.load(cv.save(tmp_path / "cv.gguf"))
    assert back.layers == [1, 2, 3] and back.model_hint == "qwen2" and back.d_model == 16
    for n in (1, 2, 3):
        assert torch.equal(back.vector(n), cv.directions[n].to(torch.float32))


def test_one_direction_on_a_layer_range(tmp_path) -> None:
    v = np.linspace(-1, 1, 8)
    back = read_control_vector(ControlVector.from_direction(v, range(2, 5), "llama").save(tmp_path / "cv.gguf"))
    assert back.layers == [2, 3, 4]
    assert all(np.allclose(back.vector(n).numpy(), v, atol=1e-7) for n in back.layers)


def test_reads_llama_cpp_and_repeng_files_at_their_own_layer_numbers(tmp_path) -> None:
    """direction.N stays layer N whoever wrote it: llama.cpp's generator (direction.1..n-1, int32
    count) and repeng's exporter (its block index N, uint32 count) number layers the same way."""
    rng = np.random.default_rng(0)
    generator = {f"direction.{n}": rng.standard_normal(8).astype(np.float32) for n in (1, 2, 3)}
    repeng = {f"direction.{n}": rng.standard_normal(8).astype(np.float32) for n in (5, 10)}
    a = read_control_vector(_write_raw(tmp_path / "gen.gguf", generator, int32=True))
    b = read_control_vector(_write_raw(tmp_path / "repeng.gguf", repeng))
    assert a.layers == [1, 2, 3] and b.layers == [5, 10]
    assert np.array_equal(b.vector(10).numpy(), repeng["direction.10"])
    assert np.array_equal(a.vector(2).numpy(), generator["direction.2"])


@pytest.mark.parametrize("tensors, count, words", [
    ({"direction.0": np.ones(4, np.float32), "direction.1": np.ones(4, np.float32)}, None, "direction.0"),
    ({"direction.1": np.ones(4, np.float32), "direction.3": np.ones(4, np.float32)}, 3, "a layer is missing"),
    ({"direction.1": np.ones(4, np.float32), "direction.2": np.ones(5, np.float32)}, None, "one width"),
    ({"direction.1": np.ones((2, 2), np.float32)}, None, "1-D float32"),
    ({"direction.1": np.ones(4, np.float16)}, None, "1-D float32"),
    ({"dir.1": np.ones(4, np.float32)}, None, "direction.N"),
])
def test_bad_control_vector_files_are_refused_in_one_line(tmp_path, tensors, count, words) -> None:
    path = _write_raw(tmp_path / "bad.gguf", tensors, layer_count=count)
    with pytest.raises(InvalidArgumentError, match="path=") as err:
        read_control_vector(path)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_model_gguf_or_another_file_is_not_a_control_vector(tmp_path) -> None:
    model_gguf = write_llama_source(tmp_path / "model.gguf", tiny_llama())
    with pytest.raises(InvalidArgumentError, match="is 'llama'"):
        read_control_vector(model_gguf)
    (tmp_path / "x.gguf").write_text("not a gguf")
    with pytest.raises(InvalidArgumentError, match="a control-vector GGUF"):
        read_control_vector(tmp_path / "x.gguf")


def test_width_or_layers_other_than_the_model_s_are_refused() -> None:
    model = tiny_llama()  # d_model 64, 3 blocks
    ControlVector({1: torch.ones(64), 2: torch.ones(64)}).check_model(model)
    with pytest.raises(InvalidArgumentError, match="d_model=64"):
        ControlVector({1: torch.ones(48)}).check_model(model)
    with pytest.raises(InvalidArgumentError, match="direction.3"):
        ControlVector({3: torch.ones(64)}).check_model(model.config)


def test_layer_zero_and_absent_layers_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="refuses direction.0"):
        ControlVector({0: torch.ones(4), 1: torch.ones(4)})
    with pytest.raises(InvalidArgumentError, match="layer=2"):
        ControlVector({1: torch.ones(4), 3: torch.ones(4)}).vector(2)


@pytest.mark.parametrize("key", ["a", "1", True, 1.5], ids=["letter", "digit-string", "bool", "float"])
def test_a_key_that_is_no_layer_number_is_one_line(key) -> None:
    """The layer keys are typed like every layer: whole numbers (a NumPy integer is one), not a
    letter (a ValueError from int() before), a string of digits, True (read as 1) or 1.5 (read as 1)."""
    with pytest.raises(InvalidArgumentError, match=r"directions=.* is invalid: expected whole-number layer keys"):
        ControlVector({key: np.ones(32)})
    assert ControlVector({np.int64(2): np.ones(32)}).layers == [2]


def test_writes_only_new_files_or_its_own(tmp_path) -> None:
    cv = ControlVector({1: torch.ones(4)}, "llama")
    theirs = write_llama_source(tmp_path / "model.gguf", tiny_llama())
    before = theirs.read_bytes()
    with pytest.raises(InvalidArgumentError, match="not written by steerformer"):
        cv.save(theirs, overwrite=True)
    assert theirs.read_bytes() == before
    ours = cv.save(tmp_path / "cv.gguf")
    with pytest.raises(InvalidArgumentError, match="overwrite=True"):
        cv.save(ours)
    ControlVector({1: 2 * torch.ones(4)}, "llama").save(ours, overwrite=True)
    assert torch.equal(read_control_vector(ours).vector(1), 2 * torch.ones(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cv.gguf", "model.gguf"]  # no temporary left
