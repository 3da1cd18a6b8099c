"""Directional ablation ("abliteration") of every residual-stream writer, as plan → apply → measure →
record (docs/math.md §5b, §5e):

    W' = (I − s UUᵀ) W,   b' = (I − s UUᵀ) b   (with ``bias=True``)

for each selected writer — the attention output, the MLP's output projection, optionally the
embeddings, as each family declares them (``adapters.base.Writer``) — with U the orthonormalized
directions (several at once; linearly dependent ones are refused), s ∈ (0, 1] per layer, and the
norm-preserving variants of ``algebra.ablation`` (beside it) ("rows": Heretic's; "columns"). A writer whose
output passes an RMS norm before the residual add (Gemma-2/3, OLMo-2) has U replaced by the
orthonormalized g ⊙ U (g the norm's gain): the norm only rescales by 1/rms and multiplies by g, so
its output is orthogonal to U exactly when the write is orthogonal to g ⊙ U. An embedding that
passes a LayerNorm (BERT, BLOOM, DistilBERT) cannot be ablated by a weight edit (the norm's mean
and bias put U back): refused, as is a token embedding tied to the LM head.

One edit per edited weight (per expert for a mixture of experts), all in one record; undone, saved,
verified and exported like any other edit. The plain projection is exactly rank k: a LoRA
(B = −sU, A = UᵀW); the norm-preserving variants are not low-rank (``save_steered(format="peft",
lora_rank=r)`` truncates them and reports the error); a bias change cannot be a LoRA at all.
``writers="attention"`` with ``bias=False`` (the defaults) is the ablation steerformer always made:
W_O only, b_O left alone.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ....errors import bad_argument
from ....matrices import read_attention_weights, select_layers
from ...chain import steering_of
from ...edit import Edit, check_layer_materialized, check_materialized
from ...lifecycle import Call, Plan, dispatch
from ...record import SteeringRecord
from ...registry import Method, register_method
from ...sources import ablation_directions
from . import algebra
from .config import AblationConfig, ablation_writers

#: offset of the RMS norm's gain per declared norm kind: g = offset + weight
_NORM_OFFSET = {"rmsnorm": 0.0, "rmsnorm+1": 1.0}


class Ablation(Method):
    """Directional ablation of every selected writer (module doc)."""

    config = AblationConfig

    def plan(self, call: Call, cfg: Any) -> Plan:
        model, source, adapter = call.model, call.source, call.adapter
        steering = steering_of(model)
        if steering is not None and steering.untie:
            raise bad_argument("model", type(model).__name__, "a model without untied layers for ablation",
                               "Unsteer it first.")
        kinds = ablation_writers(cfg.writers)
        selected = select_layers(call.layers, adapter.n_layers, name="layers")  # refuses duplicates itself
        seq = adapter.layer_sequence()
        by_slot: dict[int, int] = {}
        for L in selected:
            by_slot.setdefault(seq[L], L)  # a shared weight is edited once
        for slot, L in by_slot.items():
            check_layer_materialized(model, adapter, L, slot)
        dirs = ablation_directions(model, source, sorted(by_slot.values()), direction=call.direction,
                                   token=call.token, eigvec=call.eigvec, text=call.text, tokenizer=call.tokenizer)
        edits = plan_ablation(model, source, dirs, kinds, by_slot, cfg)
        last = max(by_slot.values())
        target = algebra.orthonormal_directions(dirs.at(last)).reshape(adapter.d_model, -1).T  # (k, d)
        target = target[0] if target.shape[0] == 1 else target
        return Plan(edits=edits, direction_source=dirs.source.to_dict(), direction=target,
                    message=_message(edits, kinds, cfg), heldout_layer=min(by_slot.values()))

    # ---- words -------------------------------------------------------------------------------
    def summary_lines(self, record: Any) -> list[str]:
        """The ablated layers and writers, s, the alignment, the price."""
        f = lambda x: "n/a" if x is None else f"{x:.4f}"  # noqa: E731
        writers = sorted({e.writer for e in record.edits}, key=["embedding", "positions", "token_type", "attention",
                                                              "mlp"].index)
        lines = [f"ablated layers {record.layers_changed} ({len(record.edits)} weight(s): {', '.join(writers)}): "
                 f"W' = (I - s UU^T) W, s = {-record.gain:g}" + (" (first layer)" if len({e.gain for e in record.edits}) > 1
                                                               else ""),
                 f"alignment, real model final states: {f(record.alignment_model_before)} -> "
                 f"{f(record.alignment_model_after)}",
                 f"weight change |dW|/|W| = {record.weight_change:.4g}; KL ({record.kl_kind}) = {f(record.kl)}; "
                 f"state cosine = {f(record.state_cosine)}"]
        return lines + ([record.message] if record.message else [])

    def card_formula(self, record: Any) -> str:
        return f"W' = (I − s·UUᵀ) W, s = {-record.gain:g}, on every writer of layers {record.layers_changed}"

    def gain_text(self, record: Any) -> str:
        return f"s = {-record.gain:g}"

    def phase_line(self, cfg: Any, call_config: Any, layers: Any, *, causal: bool, concept: bool) -> str:
        return "ablating the direction from every writer's weights ..."


def _message(edits: list[Edit], kinds: tuple[str, ...], cfg: AblationConfig) -> str:
    k = edits[0].rank
    s = cfg.scale if not isinstance(cfg.scale, dict) else "per layer"
    text = (f"ablation of {k} direction{'s' if k > 1 else ''} from {len(edits)} weight(s) ({', '.join(kinds)}; "
            f"scale {s}{'; biases too' if cfg.bias else ''})")
    if cfg.norm_preserving:
        worst = max(float(e.solve["residue"]) for e in edits)
        text += f"; norm-preserving ({cfg.norm_preserving}): residue |U^T W'|/|U^T W| up to {worst:.3g}"
    return text


def _scale_at(scale: Any, layer: int | None) -> float:
    """s for an execution layer (None: the embedding) from a number or a {layer: s} mapping."""
    if not isinstance(scale, dict):
        return float(scale)
    key = "embedding" if layer is None else layer
    for k, v in scale.items():
        if str(k) == str(key):
            return float(v)
    raise bad_argument("scale", scale, f"a scale for every ablated {'layer' if layer is not None else 'writer'} "
                       f"({'the embedding' if layer is None else f'layer {layer}'} has none)",
                       "Give a number for all, or add the missing key.")


def _writer_directions(model: Any, writer: Any, U: torch.Tensor) -> torch.Tensor:
    """The directions to remove from ``writer``'s weight so that what reaches the residual stream
    loses U: U itself, or the orthonormalized g ⊙ U behind an RMS norm of gain g (module doc)."""
    if writer.norm is None:
        return U
    if writer.norm_kind not in _NORM_OFFSET:
        kind = "embedding" if writer.slot is None else "writers"
        raise bad_argument("writers", kind, f"writers whose output reaches the residual stream through an RMS norm "
                           f"or directly; {writer.module} passes the LayerNorm {writer.norm} first (its mean and "
                           "bias put U back), so no weight edit of it removes U",
                           f"Drop '{writer.kind if writer.kind == 'embedding' else kind}' from writers.")
    g = _NORM_OFFSET[writer.norm_kind] + model.base_model.get_submodule(writer.norm).weight.detach().to(
        device="cpu", dtype=torch.float64)
    G = (g[:, None] * U.reshape(U.shape[0], -1)).T  # rows g ⊙ u_i
    return algebra.orthonormal_directions(G, name="direction (after the RMS norm's gain)")


def _check_untied(model: Any, writer: Any) -> None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = model.base_model.get_parameter(writer.weight)
    if head is not None and getattr(head, "weight", None) is weight:
        raise bad_argument("writers", "embedding", f"an embedding that is not tied to the LM head ({writer.weight} is "
                           "also the unembedding: editing it would change what the model reads out too)",
                           "Untie it first (model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach()"
                           ".clone()); model.config.tie_word_embeddings = False), or drop 'embedding' from writers.")


def plan_ablation(model: Any, source: Any, dirs: Any, kinds: tuple[str, ...], by_slot: dict[int, int],
                  cfg: AblationConfig) -> list[Edit]:
    """The edits of one ablation (module doc), in order: the embeddings, then per layer (``by_slot``:
    weight slot → the execution layer named for it) the attention output and the MLP. ``dirs``:
    ``sources.ablation_directions``' answer. Changes nothing in ``model``."""
    adapter = source.adapter
    base = model.base_model
    plans: list[tuple[Any, int, int, float, torch.Tensor]] = []  # (writer, layer, slot, s, U)
    if "embedding" in kinds:
        U = algebra.orthonormal_directions(dirs.at(None))
        for w in adapter.embedding_writers():
            if w.kind == "embedding":
                _check_untied(model, w)
            plans.append((w, -1, -1, _scale_at(cfg.scale, None), U))
    for slot, L in sorted(by_slot.items(), key=lambda kv: kv[1]):
        U = algebra.orthonormal_directions(dirs.at(L))
        for w in adapter.block_writers(slot):
            if w.kind in kinds:
                plans.append((w, L, slot, _scale_at(cfg.scale, L), U))
    edits = []
    for w, L, slot, s, U in plans:
        Uw = _writer_directions(model, w, U)
        stored = check_materialized(model, w.weight, L).detach()
        bias = base.get_parameter(w.bias_name).detach() if cfg.bias and w.bias else None
        for index in (range(stored.shape[0]) if w.layout == "experts" else [None]):
            W = w.canonical(stored if index is None else stored[index]).to(device="cpu", dtype=torch.float64)
            ab = algebra.ablation(W, Uw, s, norm_preserving=cfg.norm_preserving,
                                  b=None if bias is None else bias.to(device="cpu", dtype=torch.float64))
            edit = Edit(module=w.weight, layer=L, slot=slot, u=ab.u, a=ab.a, gain=ab.gain, kind="ablate", writer=w.kind,
                        index=index, row_scale=ab.row_scale, col_scale=ab.col_scale, transposed=w.transposed,
                        bias_delta=ab.bias_delta, bias_module=w.bias_name if ab.bias_delta is not None else None,
                        solve={"method": "ablate", "cond_V": None, "alpha": None, "fit_error": None,
                               "writer": w.kind, "directions": int(Uw.reshape(Uw.shape[0], -1).shape[1]),
                               "norm_preserving": cfg.norm_preserving, "residue": ab.residue,
                               **({"through_norm": w.norm} if w.norm is not None else {})})
            if w.kind == "attention" and edit.rank == 1:  # what the layer matrix sees (docs/math.md §5b)
                _layer_matrix_view(source, edit)
            edits.append(edit)
    return edits


def _layer_matrix_view(source: Any, edit: Edit) -> None:
    """w_eff = Vᵀaᵀ and a·b_V of an attention-output edit (F' = F + γ u w_effᵀ), as steering records them."""
    weights = read_attention_weights(source, [edit.layer], parts=("vo",), device=edit.a.device)[edit.layer]  # float64, beside a
    b_V = weights.value_bias_heads()  # per query head, like a (grouped-query layers repeat b_V)
    a = edit.a.to(torch.float64)
    edit.w_eff = weights.value_matrix().T @ a
    edit.bias_coef = None if b_V is None else float(a @ b_V.to(torch.float64))


register_method("ablation", Ablation)


def ablate(model: Any, direction: Any = None, *, token: str | None = None, eigvec: int | None = None,
           text: str | None = None, layers: Sequence[int] | int | None = None,
           scale: float | Mapping[Any, float] = 1.0, writers: str | Sequence[str] = "attention", bias: bool = False,
           norm_preserving: str | None = None, tokenizer: Any = None,
           heldout_prompts: Sequence[str] | torch.Tensor | None = None, report: bool = True) -> SteeringRecord:
    """Remove the direction(s) from the writes of ``writers`` in every layer of ``layers`` (default
    all), W' = (I − s UUᵀ) W, in place: the ablation method (this module's docstring has
    the details); one record, one edit per weight. ``direction``: one vector (d,) or k
    vectors (k, d) — array, tensor, ``.npy`` — or a :class:`~steerformer.steering.direction.Direction`
    (object, folder, Hub id, control-vector ``.gguf``: per-layer vectors at their layers); or
    ``token``, ``eigvec`` (of the last selected layer's F), ``text``. ``writers``: "attention",
    "mlp", "embedding" (a comma list or sequence). ``scale``: s in (0, 1], or {layer: s} (plus
    "embedding": s). ``bias``: also b' = (I − s UUᵀ) b. ``norm_preserving``: None, "rows"
    (Heretic's) or "columns"; the residue ‖UᵀW'‖/‖UᵀW‖ is in ``edit.solve["residue"]``.
    ``report``: measure the alignment of the final states with U and the KL on held-out prompts."""
    if not isinstance(writers, str):
        writers = ",".join(writers or [])
    options = dict(scale=scale, writers=writers, bias=bias, norm_preserving=norm_preserving, report=report)
    return dispatch(model, direction, None, "ablation", options, "ablate", token=token, eigvec=eigvec, text=text, left=None,
                    prompts=None, heldout_prompts=heldout_prompts, tokenizer=tokenizer, layers=layers)


__all__ = ["Ablation", "ablate", "plan_ablation"]
