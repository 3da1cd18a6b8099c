"""Directions as shareable artefacts: a ``Direction`` saved as safetensors + JSON and read back bit
for bit, pushed to a local stand-in Hub and loaded by its repo id, made from a contrastive
direction, imported from a llama.cpp control vector and used as the u of a weight edit at the
layer llama.cpp would add it; and every bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import steerformer as sf
from steerformer.errors import CheckpointError, InvalidArgumentError
from steerformer.formats import ControlVector
from steerformer.steering import ContrastiveDirection, Direction, ablate, steer, unsteer
from steerformer.steering.direction import VECTORS_FILE

from tests.formats.test_control_vector_files import _write_raw
from tests.models import make_model
from tests.steering.hub_server import RecordingHub


def _vecs(k: int, d: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.randn(k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _direction() -> Direction:
    return Direction({1: _vecs(2), 0: _vecs(1, seed=1)[0]}, model_id="alice/tiny-gpt2", revision="abc123",
                     method="contrastive mean-diff", prompts_sha256={"positive": "p" * 64, "negative": "n" * 64},
                     metadata={"token": "last"})


def test_save_and_load_keep_every_bit_and_the_provenance(tmp_path: Path) -> None:
    d = _direction()
    folder = d.save(tmp_path / "dir")
    meta = json.loads((folder / "direction.json").read_text())
    assert meta["layers"] == [0, 1] and meta["k"] == {"0": 1, "1": 2} and meta["d_model"] == 64
    assert meta["prompts_sha256"]["positive"] == "p" * 64 and meta["model_id"] == "alice/tiny-gpt2"
    again = Direction.load(folder)
    assert again.layers == [0, 1] and all(torch.equal(again.vectors[n], d.vectors[n]) for n in d.layers)
    assert (again.model_id, again.revision, again.method, again.metadata) == (d.model_id, d.revision, d.method,
                                                                              d.metadata)
    assert "base_model: alice/tiny-gpt2" in (folder / "README.md").read_text()
    assert sf.Direction is Direction and "layers 0, 1" in repr(again)
    # a changed vector no longer matches its sha256; a folder that is not ours is never replaced
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / VECTORS_FILE))
    tensors["layer.1"][0, 0] += 1.0
    save_file(tensors, str(folder / VECTORS_FILE))
    with pytest.raises(CheckpointError, match="layer.1 do not match the sha256") as err:
        Direction.load(folder)
    assert "\n" not in str(err.value)
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("mine")
    with pytest.raises(InvalidArgumentError, match="never replaces"):
        d.save(tmp_path / "theirs", overwrite=True)


def test_push_to_hub_then_load_by_repo_id(tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the suite runs offline
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    d = _direction()
    with RecordingHub() as hub:
        url = d.push_to_hub("alice/refusal-direction", token="hf_t", endpoint=hub.url)
        assert url.startswith(hub.url + "/alice/refusal-direction/commit/")
        assert set(hub.files) == {"direction.json", "direction.safetensors", "README.md"}
        assert 'Direction.load("alice/refusal-direction")' in hub.files["README.md"].decode()
        # what HF_ENDPOINT sets when huggingface_hub is imported: the API endpoint and the file URLs
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.url + "/{repo_id}/resolve/{revision}/{filename}")
        again = Direction.load("alice/refusal-direction")
        model = make_model("gpt2")
        rec = ablate(model, "alice/refusal-direction", layers=[1], report=False)  # a Hub id as direction=
    assert all(torch.equal(again.vectors[n], d.vectors[n]) for n in d.layers)
    assert rec.direction_source["from"] == "alice/refusal-direction" and rec.edits[0].rank == 2


def test_a_contrastive_direction_converts_with_its_prompt_hashes() -> None:
    cd = ContrastiveDirection(vector=_vecs(1)[0] / _vecs(1)[0].norm(), method="pca", layer=3, token="last",
                              n_positive=4, n_negative=4, positive_sha256="a" * 64, negative_sha256="b" * 64,
                              raw_norm=2.5, explained=0.7, model_id="org/model", model_commit="c0ffee")
    d = cd.to_direction()
    assert d.layers == [3] and torch.equal(d.vectors[3][0], cd.vector)
    assert d.method == "contrastive pca" and (d.model_id, d.revision) == ("org/model", "c0ffee")
    assert d.prompts_sha256 == {"positive": "a" * 64, "negative": "b" * 64}
    assert d.metadata["explained"] == 0.7 and d.metadata["n_positive"] == 4


def test_a_control_vector_is_the_u_of_an_edit_at_its_own_layer(tmp_path: Path) -> None:
    vecs = {1: _vecs(1, seed=3)[0].float(), 2: _vecs(1, seed=4)[0].float()}
    path = ControlVector(vecs, "gpt2").save(tmp_path / "cv.gguf")
    d = Direction.from_control_vector(path)
    assert d.method == "control vector" and d.layers == [1, 2] and d.metadata["model_hint"] == "gpt2"
    assert torch.equal(d.vectors[2][0], vecs[2].double())
    model = make_model("gpt2")
    rec = steer(model, str(path), layer=1, gain=2.0, solve="exact", report=False)  # direction.1 at layer 1
    want = vecs[1].double() / vecs[1].double().norm()
    torch.testing.assert_close(torch.tensor(rec.direction, dtype=torch.float64), want, rtol=0, atol=1e-15)
    assert rec.direction_source["kind"] == "direction" and rec.direction_source["method"] == "control vector"
    unsteer(model)
    with pytest.raises(InvalidArgumentError, match="layer 0"):  # llama.cpp has no slot for block 0
        ablate(model, str(path), report=False)
    rec = ablate(model, str(path), layers=[1], report=False)
    assert rec.edits[0].layer == 1
    assert torch.equal(d.to_control_vector().directions[1], vecs[1])


@pytest.mark.parametrize("case", ["width", "direction.0", "missing layer", "model gguf", "k>1 for steer"])
def test_bad_directions_are_one_line(tmp_path: Path, case: str) -> None:
    model = make_model("gpt2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    if case == "width":
        arg, words = ControlVector({1: np.ones(32, np.float32)}, "llama").save(tmp_path / "w.gguf"), "d_model=64"
    elif case == "direction.0":
        arg = _write_raw(tmp_path / "z.gguf", {"direction.0": np.ones(64, np.float32)})
        words = "direction.0"
    elif case == "missing layer":
        arg = _write_raw(tmp_path / "m.gguf", {"direction.1": np.ones(64, np.float32)}, layer_count=2)
        words = "a layer is missing"
    elif case == "model gguf":
        from tests.formats.gguf_sources import tiny_llama, write_llama_source

        arg, words = write_llama_source(tmp_path / "model.gguf", tiny_llama()), "is 'llama'"
    else:
        arg, words = Direction({1: _vecs(2)}).save(tmp_path / "two"), "one direction for a steering edit"
    with pytest.raises(InvalidArgumentError, match="direction=") as err:
        steer(model, str(arg), layer=1, gain=1.0, solve="exact", report=False)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
