"""A steered model's edits as a PEFT LoRA adapter (docs/math.md §5c), vLLM's route to per-request
steering, and the choice of the adapter's rank under a cost budget.

Every low-rank edit is ΔW = γ U A on one stored writer weight. The edits of one module stack into
a LoRA of rank Σk, B = [γ₁U₁ … γ_k U_k] (out × Σk), A = [A₁; …; A_k] (Σk × in), so B @ A = Σ ΔW
(``Steering.factors``): exact. A norm-preserving ablation is not low-rank: its module's whole
change ΔW = W − W₀ is truncated to rank ``lora_rank`` by an SVD, B = U_r √S_r, A = √S_r V_rᵀ (the
singular values split evenly, as Heretic does), and the truncation error ‖ΔW − BA‖_F / ‖ΔW‖_F is
reported. Written as PEFT expects it:

    adapter_config.json        peft_type LORA, r = the most common rank, lora_alpha = r (scaling 1),
                               target_modules = the edited modules, fan_in_fan_out for GPT-2's
                               Conv1D (which stores Wᵀ); modules of another rank get their own r and
                               alpha = r through rank_pattern/alpha_pattern — so alpha/r = 1 for
                               every module, the one scale vLLM applies (it reads no patterns)
    adapter_model.safetensors  base_model.model.<module>.lora_A.weight (k × in),
                               base_model.model.<module>.lora_B.weight (out × k) — for a token
                               embedding lora_embedding_A (k × vocab), lora_embedding_B (d × k) —
                               in the edited weight's dtype; <module> is the path inside the steered
                               model's own class (``model.layers.3.mlp.down_proj`` for
                               LlamaForCausalLM: the class vLLM serves), so load it into that class
    README.md                  card: library_name peft, base_model, tag base_model:adapter:<id>
    steerformer/record.json    the steering records and each module's rank and truncation error

``PeftModel.from_pretrained(base, dir)`` then computes what the steered model computes (exactly, up
to the rounding of B @ A, for low-rank edits), and ``merge_and_unload()`` gives the steered weights.
Refused with one line: an edit that changes a bias (``compensate_bias``, an ablation with
``bias=True`` — a LoRA has no bias), an untied ALBERT layer, stacked expert weights, learned position
or token-type embeddings, and a norm-preserving edit without ``lora_rank``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..errors import bad_argument
from ..outputs import STEERED, write_atomically
from .chain import steering_of
from .common import write_records
from ..loading import display_name, public_model_id

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_FORMAT = "steerformer.peft-adapter/1"
#: the ranks :func:`choose_lora_rank` tries by default
RANKS = (1, 2, 3, 4, 8, 16, 32, 64)


@dataclasses.dataclass
class LoraFactors:
    """One module's adapter: ΔW ≈ B @ A in the canonical layout (float64), whether that is exact,
    and the truncation error ‖ΔW − BA‖_F / ‖ΔW‖_F (0 when exact)."""

    B: torch.Tensor  # (out, r)
    A: torch.Tensor  # (r, in)
    exact: bool
    relative_error: float
    embedding: bool  # a token embedding: PEFT's lora_embedding_A/B
    transposed: bool  # the stored weight is Wᵀ (Conv1D: fan_in_fan_out)

    @property
    def rank(self) -> int:
        return int(self.A.shape[0])


def truncated(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(B, A, relative error) of the best rank-``rank`` approximation B @ A of ``delta`` (SVD,
    float64, deterministic), √S on each side."""
    U, S, Vh = torch.linalg.svd(delta.to(torch.float64), full_matrices=False)
    r = min(int(rank), int(S.shape[0]))
    root = S[:r].sqrt()
    total = float(S.pow(2).sum())
    err = math.sqrt(float(S[r:].pow(2).sum()) / total) if total > 0 else 0.0
    return U[:, :r] * root[None, :], root[:, None] * Vh[:r], err


def lora_factors(model: Any, lora_rank: int | None = None) -> dict[str, LoraFactors]:
    """{stored weight name: LoraFactors} of the steered ``model`` (module doc). ``lora_rank``: the
    rank of the truncated SVD for a module whose edits are not low-rank (norm-preserving ablation)
    or whose exact rank exceeds it; None keeps every module exact (and refuses the others)."""
    steering = steering_of(model)
    if steering is None:
        raise bad_argument("model", type(model).__name__, "a model edited by steerformer.steering.steer",
                           "Steer it first; a LoRA adapter holds the edits.")
    if steering.untie:
        raise bad_argument("format", "peft", "a model whose layers were not untied (an adapter cannot untie "
                           "ALBERT's shared layer)", "Export the full checkpoint (format='checkpoint') instead.")
    if any(e.changes_bias for e in steering.edits):
        raise bad_argument("format", "peft", "edits that change no bias (a LoRA adapter cannot change a bias: not the "
                           "output bias b_O of compensate_bias, nor b' = (I - sUU^T) b of an ablation with bias=True)",
                           "Export the full checkpoint (format='checkpoint') instead, or ablate with bias=False.")
    if lora_rank is not None and (isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1):
        raise bad_argument("lora_rank", lora_rank, "a whole number >= 1 (the rank of the truncated adapter)")
    base = model.base_model
    out: dict[str, LoraFactors] = {}
    for name in steering.modules():
        edits = steering.edits_of(name)
        first = edits[0]
        where = f"{name} ({first.writer})"
        if any(e.index is not None for e in edits):
            raise bad_argument("format", "peft", f"edits of ordinary weights ({where} stacks the experts of a "
                               "mixture; steerformer exports no LoRA for it)", "Export the full checkpoint instead.")
        if first.writer in ("positions", "token_type"):
            raise bad_argument("format", "peft", f"edits PEFT can wrap ({where}: a LoRA on learned position or "
                               "token-type embeddings is not exported)", "Export the full checkpoint instead.")
        embedding = isinstance(base.get_submodule(name.rsplit(".", 1)[0]), torch.nn.Embedding)
        transposed = first.transposed and not embedding
        if all(e.is_low_rank for e in edits) and (lora_rank is None or sum(e.rank for e in edits) <= lora_rank):
            B, A = steering.factors(name)
            out[name] = LoraFactors(B, A, True, 0.0, embedding, transposed)
            continue
        if lora_rank is None:
            raise bad_argument("lora_rank", None, f"a rank for the truncated adapter: the edits of {where} are not "
                               "low-rank (norm-preserving ablation keeps the norms with a full-rank change)",
                               "Pass lora_rank=r (CLI --lora-rank; Heretic uses 3): the truncation error is "
                               "reported.")
        current = base.get_parameter(name).detach().to(device="cpu", dtype=torch.float64)
        delta = current - steering.originals[name].to(device="cpu", dtype=torch.float64)
        delta = delta.T if first.transposed else delta  # canonical (out, in)
        B, A, err = truncated(delta, lora_rank)
        out[name] = LoraFactors(B, A, False, err, embedding, transposed)
    return out


def lora_tensors(model: Any, lora_rank: int | None = None) -> tuple[dict[str, torch.Tensor], dict[str, int], bool,
                                                                       dict[str, LoraFactors]]:
    """({PEFT key: tensor}, {module path: rank}, fan_in_fan_out, {module path: factors}) for the
    steered ``model``."""
    factors = lora_factors(model, lora_rank)
    base = model.base_model
    names = {id(m): n for n, m in model.named_modules()}  # id(module) -> its path (the class PEFT will wrap)
    tensors: dict[str, torch.Tensor] = {}
    ranks: dict[str, int] = {}
    by_path: dict[str, LoraFactors] = {}
    for weight_name, f in factors.items():
        full = names[id(base.get_submodule(weight_name.rsplit(".", 1)[0]))]
        dtype = base.get_parameter(weight_name).dtype
        a_key, b_key = ("lora_embedding_A", "lora_embedding_B") if f.embedding else ("lora_A.weight", "lora_B.weight")
        tensors[f"base_model.model.{full}.{a_key}"] = f.A.to(dtype).contiguous().cpu()
        tensors[f"base_model.model.{full}.{b_key}"] = f.B.to(dtype).contiguous().cpu()
        ranks[full] = f.rank
        by_path[full] = f
    layouts = {f.transposed for f in factors.values() if not f.embedding}  # PEFT's Embedding ignores the flag
    if len(layouts) > 1:
        raise bad_argument("format", "peft", "modules stored one way (PEFT's fan_in_fan_out is one flag for the "
                           "adapter; these mix Conv1D and Linear)", "Export the full checkpoint instead.")
    return tensors, ranks, layouts == {True}, by_path


def adapter_config(ranks: dict[str, int], fan_in_fan_out: bool, base_model: str | None) -> dict:
    """The LoRA config: scaling lora_alpha / r = 1 for every module."""
    r = max(set(ranks.values()), key=list(ranks.values()).count)  # the most common rank
    pattern = {m: k for m, k in ranks.items() if k != r}
    return {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": base_model, "revision": None,
        "inference_mode": True, "r": r, "lora_alpha": r, "lora_dropout": 0.0, "bias": "none",
        "target_modules": sorted(ranks), "fan_in_fan_out": bool(fan_in_fan_out), "init_lora_weights": True,
        "use_rslora": False, "use_dora": False, "modules_to_save": None,
        "rank_pattern": pattern, "alpha_pattern": dict(pattern),
    }


CARD = """---
{yaml}
---

# {title}

A rank-{ranks} LoRA adapter for **{base}** that reproduces {n} steering edit{s} of residual-stream
writers made with [steerformer](https://pypi.org/project/steerformer/): each low-rank edit
ΔW = γ U A is the LoRA pair lora_B = γ U, lora_A = A with scaling 1 (lora_alpha = r); a
norm-preserving ablation is its best rank-r approximation (truncation error below).

    from peft import PeftModel
    model = PeftModel.from_pretrained(base_model, "THIS_FOLDER")   # base_model: {cls}

| module | rank | exact | truncation error |
|---|---|---|---|
{rows}

The steering records (directions, gains, how each was chosen) are in `steerformer/record.json`.
"""


def save_peft_adapter(model: Any, directory: str | os.PathLike, *, overwrite: bool = False, card: bool = True,
                      lora_rank: int | None = None, name: str = "directory") -> Path:
    """Write the edits of the steered ``model`` as a PEFT LoRA adapter folder (module doc);
    ``lora_rank``: see :func:`lora_factors`; ``name``: the argument errors about ``directory`` name."""
    from huggingface_hub import ModelCardData
    from safetensors.torch import save_file  # looked up when called: a test stands in a full disk for it

    tensors, ranks, fan_in_fan_out, factors = lora_tensors(model, lora_rank)
    steering = steering_of(model)
    records = steering.records
    base_id = public_model_id(records[0].model_id)
    config = adapter_config(ranks, fan_in_fan_out, base_id or records[0].model_id)
    lora = {m: {"rank": f.rank, "exact": f.exact, "relative_error": f.relative_error} for m, f in sorted(factors.items())}

    def fill(tmp: Path) -> None:
        save_file(tensors, str(tmp / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2))
        write_records(tmp, {"format": ADAPTER_FORMAT, **steering.to_dict(), "lora": lora})
        if card:
            tags = ["steerformer", "steering", "lora", records[0].model_type] + \
                ([f"base_model:adapter:{base_id}"] if base_id else [])
            data = ModelCardData(base_model=base_id, library_name="peft", tags=tags)
            rows = "\n".join(f"| `{m}` | {v['rank']} | {'yes' if v['exact'] else 'no'} | {v['relative_error']:.3g} |"
                             for m, v in lora.items())
            n = len(steering.edits)
            (tmp / "README.md").write_text(CARD.format(
                yaml=data.to_yaml(), title=f"{display_name(records[0].model_id)} steering adapter",
                base=display_name(records[0].model_id), n=n, s="" if n == 1 else "s",
                ranks="/".join(str(k) for k in sorted(set(ranks.values()))), cls=type(model).__name__, rows=rows))

    # the adapter folder carries steerformer/record.json (a steer output); never the model's own folder
    return write_atomically(directory, fill, overwrite=overwrite, kind=STEERED,
                            inputs=[getattr(model.config, "_name_or_path", None)], name=name)


@dataclasses.dataclass
class LoraRankChoice:
    """The smallest rank whose adapter keeps the cost within the budget (None: none of those tried),
    and every (rank, cost, largest truncation error) tried, in order."""

    rank: int | None
    budget: float
    tried: list[tuple[int, float, float]]


def choose_lora_rank(model: Any, cost: Callable[[Any], float], *, max_cost: float,
                     ranks: Sequence[int] = RANKS) -> LoraRankChoice:
    """The smallest of ``ranks`` whose adapter keeps ``cost(model) <= max_cost``: for each rank the
    model is given the adapter's merged weights W₀ + B_r A_r (in place), ``cost`` is called on it —
    e.g. the KL to the base model on neutral prompts, in nats per token (the evaluation of a real
    chat model plugs in here) — and the steered weights are put back bit for bit (also when
    ``cost`` raises). Stops at the first rank within the budget."""
    steering = steering_of(model)
    base = model.base_model
    tried: list[tuple[int, float, float]] = []
    for r in sorted(set(int(k) for k in ranks)):
        factors = lora_factors(model, r)
        kept = {n: base.get_parameter(n).detach().clone() for n in factors}
        try:
            with torch.no_grad():
                for n, f in factors.items():
                    p = base.get_parameter(n)
                    W0 = steering.originals[n].to(device=p.device, dtype=torch.float64)
                    D = (f.B @ f.A).to(p.device)
                    p.copy_((W0 + (D.T if steering.edits_of(n)[0].transposed else D)).to(p.dtype))
            value = float(cost(model))
        finally:
            with torch.no_grad():
                for n, t in kept.items():
                    base.get_parameter(n).copy_(t)
        tried.append((r, value, max(f.relative_error for f in factors.values())))
        if value <= max_cost:
            return LoraRankChoice(r, float(max_cost), tried)
    return LoraRankChoice(None, float(max_cost), tried)
