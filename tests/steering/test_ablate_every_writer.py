"""Directional ablation of every residual-stream writer (docs/math.md §5e), checked against the modules'
real outputs (hooks on one forward pass): after s = 1 each ablated write has no component along U
for random inputs — behind Gemma-2's and OLMo-2's RMS norms too —, the residual stream of a pre-LN
model stays orthogonal to U when every writer and the embeddings are ablated, s < 1 and the
norm-preserving variants give the weights their formulas give (written here), and everything is
undone bit for bit, saved, verified and reloaded."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from steerformer.adapters import get_adapter
from steerformer.adapters.base import first_output
from steerformer.errors import InvalidArgumentError
from steerformer.steering import Direction, ablate, load_model, save_steered, unsteer, verify_checkpoint

from tests.models import DECLARED_FAMILIES, make_model

HAND_WRITTEN = ["gpt2-base", "gpt_neo-base", "bert", "albert-2groups-inner2"]
#: embeddings that pass a LayerNorm before the residual stream: a weight edit cannot ablate them
LAYERNORM_EMBEDDINGS = {"bert", "roberta", "xlm-roberta", "distilbert", "bloom"}


def _directions(d: int, k: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _span(D: torch.Tensor) -> torch.Tensor:
    Q, _ = torch.linalg.qr(D.T)
    return Q  # (d, k) orthonormal, computed here independently of the library


def _ids(model, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, int(model.config.vocab_size), (2, 9), generator=torch.Generator().manual_seed(seed))


def _writes(model, ids) -> dict[str, list[torch.Tensor]]:
    """What each declared writer adds to the residual stream (after its own RMS norm), per call."""
    adapter = get_adapter(model.config)
    base = model.base_model
    where = {}
    for w in adapter.writers():
        where[w.norm if w.norm is not None and w.norm_kind != "layernorm" else w.output_module] = w.weight
    seen: dict[str, list] = {n: [] for n in where.values()}
    handles = [base.get_submodule(m).register_forward_hook(
        lambda mod, a, o, n=n: seen[n].append(first_output(o).detach().clone())) for m, n in where.items()]
    try:
        with torch.no_grad():
            model(input_ids=ids, **({"use_cache": False} if getattr(model.config, "use_cache", None) is not None else {}))
    finally:
        for h in handles:
            h.remove()
    return seen


def _share_along(x: torch.Tensor, Q: torch.Tensor) -> float:
    """max over tokens of ‖Qᵀx‖ / ‖x‖."""
    x = x.reshape(-1, x.shape[-1]).double()
    return float(((x @ Q).norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-300)).max())


@pytest.mark.parametrize("name", HAND_WRITTEN + DECLARED_FAMILIES)
def test_every_ablated_write_loses_U_and_everything_comes_back(name: str) -> None:
    model = make_model(name)
    original = copy.deepcopy(model.state_dict())
    adapter = get_adapter(model.config)
    D = _directions(adapter.d_model)
    Q = _span(D)
    kinds = "attention,mlp" if model.config.model_type in LAYERNORM_EMBEDDINGS else "attention,mlp,embedding"
    rec = ablate(model, D, writers=kinds, bias=True, report=False)
    ablated = {e.module for e in rec.edits}
    writes = _writes(model, _ids(model))
    for w in adapter.writers(kinds.split(",") + (["positions", "token_type"] if "embedding" in kinds else [])):
        assert w.weight in ablated, w
        tol = 1e-9 if w.norm is None else 1e-6  # Gemma's and OLMo-2's RMS norms compute in float32
        for y in writes[w.weight]:
            assert _share_along(y, Q) <= tol, (w.weight, _share_along(y, Q))
    assert all(e.solve["residue"] <= 1e-12 for e in rec.edits)
    if "embedding" in kinds and adapter.residual in ("pre", "parallel", "sandwich", "norm-after"):
        # every write is orthogonal to U, so is every residual state before the final norm
        with torch.no_grad():
            states = model(input_ids=_ids(model, 2), output_hidden_states=True).hidden_states[:-1]
        assert max(_share_along(h, Q) for h in states) <= (1e-9 if adapter.residual == "pre" else 1e-6)
    unsteer(model)
    assert all(torch.equal(original[k], v) for k, v in model.state_dict().items())


def test_partial_scale_gives_the_projection_on_a_conv1d_mlp_and_its_bias() -> None:
    model = make_model("gpt2")
    base = model.base_model
    W0 = base.get_parameter("h.1.mlp.c_proj.weight").detach().T.clone()  # Conv1D stores Wᵀ
    b0 = base.get_parameter("h.1.mlp.c_proj.bias").detach().clone()
    D = _directions(64, 3, seed=4)
    Q = _span(D)
    P = torch.eye(64, dtype=torch.float64) - 0.4 * Q @ Q.T
    rec = ablate(model, D, layers=[1], writers=["mlp"], scale=0.4, bias=True, report=False)
    torch.testing.assert_close(base.get_parameter("h.1.mlp.c_proj.weight").detach().T, P @ W0, rtol=0, atol=1e-12)
    torch.testing.assert_close(base.get_parameter("h.1.mlp.c_proj.bias").detach(), P @ b0, rtol=0, atol=1e-13)
    assert [(e.writer, e.layer, e.rank) for e in rec.edits] == [("mlp", 1, 3)]
    assert abs(rec.edits[0].solve["residue"] - 0.6) <= 1e-12  # ‖Uᵀ(I − 0.4P)W‖ = 0.6 ‖UᵀW‖


@pytest.mark.parametrize("variant", ["rows", "columns"])
def test_norm_preserving_variants_keep_their_norms_and_report_the_residue(variant: str) -> None:
    model = make_model("llama")
    base = model.base_model
    name = "layers.0.mlp.down_proj.weight"
    W0 = base.get_parameter(name).detach().clone()
    D = _directions(32, 1, seed=5)
    u = D[0] / D[0].norm()
    rec = ablate(model, D, layers=[0], writers="mlp", norm_preserving=variant, report=False)
    W1 = base.get_parameter(name).detach()
    dim = 1 if variant == "rows" else 0
    torch.testing.assert_close(W1.norm(dim=dim), W0.norm(dim=dim), rtol=1e-13, atol=0)
    if variant == "rows":  # Heretic's "full" row normalization, transcribed from its abliterate()
        n = W0.norm(dim=1, keepdim=True)
        R = W0 / n - torch.outer(u, u @ (W0 / n))
        want = R / R.norm(dim=1, keepdim=True) * n
    else:
        R = W0 - torch.outer(u, u @ W0)
        want = R / R.norm(dim=0, keepdim=True) * W0.norm(dim=0, keepdim=True)
    torch.testing.assert_close(W1, want, rtol=0, atol=1e-12)
    residue = float((u @ W1).norm() / (u @ W0).norm())
    assert abs(rec.edits[0].solve["residue"] - residue) <= 1e-12
    assert (residue > 1e-3) if variant == "rows" else (residue <= 1e-12)  # rows no longer remove u exactly
    assert "residue" in rec.summary()


def test_per_layer_scale_layer_ranges_and_shared_directions_per_layer() -> None:
    model = make_model("qwen2")
    base = model.base_model
    before = {k: v.clone() for k, v in base.state_dict().items()}
    D0, D1 = _directions(32, 1, seed=6), _directions(32, 2, seed=7)
    direction = Direction({0: D0, 1: D1}, model_id="tiny-qwen2", method="test")
    rec = ablate(model, direction, writers="attention,mlp", scale={0: 1.0, 1: 0.5}, report=False)
    assert [(e.layer, e.writer, e.rank, e.gain) for e in rec.edits] == [
        (0, "attention", 1, -1.0), (0, "mlp", 1, -1.0), (1, "attention", 2, -0.5), (1, "mlp", 2, -0.5)]
    for layer, D, s in ((0, D0, 1.0), (1, D1, 0.5)):
        Q = _span(D)
        name = f"layers.{layer}.self_attn.o_proj.weight"
        want = (torch.eye(32, dtype=torch.float64) - s * Q @ Q.T) @ before[name]
        torch.testing.assert_close(base.get_parameter(name).detach(), want, rtol=0, atol=1e-12)
    assert rec.direction_source["kind"] == "direction" and rec.direction_source["layers"] == [0, 1]
    unsteer(model)
    rec = ablate(model, D1, layers=[1], writers="mlp", report=False)
    assert [e.module for e in rec.edits] == ["layers.1.mlp.down_proj.weight"]


def test_a_shared_albert_layer_is_ablated_once_and_saved_verified_reloaded(tmp_path: Path) -> None:
    model = make_model("albert", dtype=torch.float32)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    rec = ablate(model, _directions(64, 2), writers="attention,mlp,embedding", bias=True, report=True)
    assert len({e.module for e in rec.edits}) == len(rec.edits) == 3  # mapping_in, attention, ffn_output
    assert rec.layers_changed == [0, 1, 2, 3] and rec.state_cosine is not None
    out = save_steered(model, tmp_path / "ablated")
    assert verify_checkpoint(out)["ok"]
    again = load_model(out)
    unsteer(again)
    assert all(torch.equal(original[k], v) for k, v in again.state_dict().items())


def test_the_experts_of_a_mixture_are_each_ablated() -> None:
    model = make_model("mixtral")
    D = _directions(32, 2, seed=8)
    rec = ablate(model, D, writers="mlp", report=False)
    assert sorted((e.layer, e.index) for e in rec.edits) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    Q = _span(D)
    for layer in (0, 1):
        W = model.base_model.get_parameter(f"layers.{layer}.mlp.experts.down_proj").detach()
        assert float((Q.T @ W).abs().max()) <= 1e-12


def test_bad_input_is_one_line_and_changes_nothing() -> None:
    model = make_model("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    D = _directions(32, 2)
    dependent = torch.stack([D[0], D[1], 2 * D[0] - 0.5 * D[1]])
    cases = [
        (dict(direction=dependent), "linearly independent"),
        (dict(direction=D, scale=1.5), "scale=1.5"),
        (dict(direction=D, scale=0.0), "scale=0.0"),
        (dict(direction=D, scale={0: 1.0}), "layer 1 has none"),
        (dict(direction=D, writers="attention,ffn"), "writers="),
        (dict(direction=D, norm_preserving="both"), "norm_preserving="),
        (dict(direction=Direction({0: D[:1], 1: D[1:]}), writers="attention,embedding"), "one per layer"),
        (dict(direction=Direction({0: D[:1], 5: D[1:]}), layers=[1]), "for layer 1"),
    ]
    for kw, match in cases:
        with pytest.raises(InvalidArgumentError, match=match) as err:
            ablate(model, kw.pop("direction"), report=False, **kw)
        assert "\n" not in str(err.value)
    for name, kinds in (("bert", "embedding"), ("gpt2", "attention,embedding")):  # LayerNorm after / tied head
        other = make_model(name)
        with pytest.raises(InvalidArgumentError, match="LayerNorm|tied"):
            ablate(other, _directions(64, 1)[0], writers=kinds, report=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
