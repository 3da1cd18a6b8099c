"""Attention weights are read once per (layer, parts) per call, and a ``ModelSource`` passes through
``as_source`` unchanged."""

from __future__ import annotations

import torch



def test_as_source_passes_a_source_through(tmp_path) -> None:
    from steerformer.loading import ModelSource, as_source
    from tests.models import make_model

    model = make_model("gpt2")
    src = as_source(model)
    assert isinstance(src, ModelSource) and as_source(src) is src and src.model is model


def test_power_method_stats_reads_each_attention_tensor_once(tmp_path, monkeypatch) -> None:
    """From a checkpoint folder, layer_matrices and the dynamics share one read of V/O (and Q/K)."""
    from collections import Counter

    from steerformer.loading import SafetensorsReader, open_source
    from steerformer.matrices import layer_matrices
    from steerformer.stats.run import power_method_stats
    from tests.models import make_model

    make_model("gpt2", dtype=torch.float32).save_pretrained(tmp_path)
    reads: Counter = Counter()
    real = SafetensorsReader.get
    monkeypatch.setattr(SafetensorsReader, "get", lambda self, key: reads.update([key]) or real(self, key))
    source = open_source(tmp_path)
    rep = power_method_stats(source, n_prompts=2, n_tokens=3, prompts=None, null_draws=0)
    attn = {k: n for k, n in reads.items() if ".attn." in k}
    assert attn and set(attn.values()) == {1}, attn
    # The numbers are those of a fresh, uncached read.
    fresh = layer_matrices(tmp_path)
    torch.testing.assert_close(layer_matrices(source).matrices, fresh.matrices, rtol=0, atol=0)
    assert rep is not None


def test_steer_reads_each_layers_attention_once(monkeypatch) -> None:
    """steer reads V/O for the eigenvector, the edit and the dynamics probe: one read per layer per
    call (memoized on the call's source); the numbers equal those of an unmemoized call."""
    from collections import Counter

    from steerformer.adapters import get_adapter
    from steerformer.steering import steer
    from tests.models import make_model

    kw = dict(eigvec=0, layer=1, measure="dynamics", solve="exact", target_alignment=0.5, dynamics_n_prompts=3,
              dynamics_tokens=4)
    plain = steer(make_model("gpt2"), **kw)
    model = make_model("gpt2")
    cls = type(get_adapter(model.config))
    reads: Counter = Counter()
    real = cls.read_attention
    monkeypatch.setattr(cls, "read_attention", lambda self, k, get, parts=("qk", "vo"): reads.update([k]) or
                        real(self, k, get, parts))
    rec = steer(model, **kw)
    assert reads and set(reads.values()) == {1}, reads
    assert rec.gain == plain.gain and rec.details.alignment_dynamics_after == plain.details.alignment_dynamics_after
