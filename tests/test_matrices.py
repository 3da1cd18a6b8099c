"""Lazy (safetensors) extraction equals in-memory extraction bit for bit; bad checkpoints fail clearly."""

from __future__ import annotations

import json
import time

import pytest
import torch

from steerformer import layer_matrices
from steerformer.errors import CheckpointError, InvalidArgumentError, ModelNotFoundError, UnsupportedModelError
from steerformer.loading import SafetensorsReader

from tests.models import make_model


@pytest.mark.parametrize("family", ["gpt2", "gpt2-base", "gpt_neo", "bert-mlm", "albert-2groups-inner2"])
@pytest.mark.parametrize("shard", [None, "20KB"])
def test_lazy_equals_in_memory(tmp_path, family: str, shard: str | None) -> None:
    model = make_model(family, dtype=torch.float32)
    kw = {} if shard is None else {"max_shard_size": shard}
    model.save_pretrained(tmp_path, **kw)
    if shard is not None:
        assert (tmp_path / "model.safetensors.index.json").is_file()
    lazy = layer_matrices(tmp_path)
    mem = layer_matrices(model)
    assert torch.equal(lazy.matrices, mem.matrices)
    assert torch.equal(lazy.biases, mem.biases)
    assert lazy.layer_ids == mem.layer_ids and lazy.slot_ids == mem.slot_ids
    # And F is really W_O·V: check one layer against the module weights by hand.
    if family.startswith("bert"):
        att = model.base_model.encoder.layer[1].attention
        F = att.output.dense.weight.double() @ att.self.value.weight.double()
        assert torch.allclose(mem.matrices[1], F, rtol=0, atol=1e-12)
    if family == "gpt2":
        attn = model.transformer.h[1].attn
        d = model.config.n_embd
        F = (attn.c_attn.weight[:, 2 * d:].double() @ attn.c_proj.weight.double()).T
        assert torch.allclose(mem.matrices[1], F, rtol=0, atol=1e-12)


def test_lazy_reads_only_value_and_output_tensors(tmp_path, monkeypatch) -> None:
    make_model("bert", dtype=torch.float32).save_pretrained(tmp_path)
    read: list[str] = []
    orig = SafetensorsReader.get
    monkeypatch.setattr(SafetensorsReader, "get", lambda self, k: (read.append(k), orig(self, k))[1])
    layer_matrices(tmp_path)
    assert read and all(any(p in k for p in (".value.", ".output.dense.")) for k in read), read


def test_layer_selection_and_range_error(tmp_path) -> None:
    model = make_model("gpt2")
    sel = layer_matrices(model, layers=[-1])
    assert sel.layer_ids == [1]
    assert torch.equal(sel.matrices[0], layer_matrices(model).matrices[1])
    with pytest.raises(InvalidArgumentError, match=r"layers=\[5\].*the model has 2 layers"):
        layer_matrices(model, layers=[5])


def test_unknown_model_offline_fails_fast() -> None:
    t = time.perf_counter()
    with pytest.raises(ModelNotFoundError, match="local checkpoint directory"):
        layer_matrices("no-such-org/no-such-model-xyz")
    assert time.perf_counter() - t < 1.0


def test_directory_without_weights(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelNotFoundError, match="holds no weights"):
        layer_matrices(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        layer_matrices(empty)


def test_unsupported_model_type_in_checkpoint(tmp_path) -> None:
    from transformers import T5Config

    T5Config(d_model=8, num_layers=1, num_heads=1, d_kv=8, d_ff=8, vocab_size=10).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UnsupportedModelError, match="supported model types: albert, bert, .*gpt2, .*llama"):
        layer_matrices(tmp_path)


def test_bin_only_checkpoint_loads_through_transformers(tmp_path, caplog) -> None:
    model = make_model("gpt2", dtype=torch.float32)
    # transformers 5 no longer writes .bin checkpoints: write the legacy layout by hand.
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    assert not list(tmp_path.glob("*.safetensors"))
    with caplog.at_level("WARNING"):
        lm = layer_matrices(tmp_path)
    assert "through transformers" in caplog.text
    assert torch.equal(lm.matrices, layer_matrices(model).matrices)


def test_non_finite_weight_names_the_tensor(tmp_path) -> None:
    model = make_model("bert", dtype=torch.float32)
    with torch.no_grad():
        model.encoder.layer[1].attention.self.value.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.1\.attention\.self\.value\.weight.*non-finite"):
        layer_matrices(tmp_path)
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.1\.attention\.self\.value\.weight"):
        layer_matrices(model)


def test_bundled_minilm_resolves_offline() -> None:
    lm = layer_matrices("sentence-transformers/all-MiniLM-L6-v2", layers=[0])
    assert (lm.model_type, lm.d_model, lm.n_heads, lm.n_layers) == ("bert", 384, 12, 6)
    assert lm.source["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"


def _fake_hub_cache(root, repo_id: str, model, commit: str = "0123456789abcdef0123456789abcdef01234567"):
    """Lay out a checkpoint the way huggingface_hub caches it (models--org--name/snapshots/<sha>)."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    model.save_pretrained(snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return commit


def test_hub_id_resolves_from_the_cache_offline(tmp_path, monkeypatch) -> None:
    import huggingface_hub.constants

    model = make_model("gpt_neo", dtype=torch.float32)
    commit = _fake_hub_cache(tmp_path, "someone/tiny-neo", model)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    lm = layer_matrices("someone/tiny-neo")
    assert lm.source["commit"] == commit and lm.source["model_id"] == "someone/tiny-neo"
    assert torch.equal(lm.matrices, layer_matrices(model).matrices)
    # A revision that is not cached fails fast and says what to do.
    with pytest.raises(ModelNotFoundError, match="revision 'v2'.*local checkpoint directory"):
        layer_matrices("someone/tiny-neo", revision="v2")
