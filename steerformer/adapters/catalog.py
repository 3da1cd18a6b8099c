"""What each supported family is and which features run on it (``steerformer models``).

The facts are read from each adapter built on the family's default config (transformers'
``CONFIG_MAPPING[model_type]()``), so this table cannot drift from the declarations. Feature
notes record what the test suite checks per family (tests/adapters/, tests/collapse/,
tests/steering/).
"""

from __future__ import annotations

import dataclasses

from .declared import DeclaredAdapter
from .registry import ADAPTERS

#: every feature, in the order shown
FEATURES = ("matrices", "spectra", "statistics", "steering", "collapse", "bridge")

#: families whose features carry a caveat (everything else: all features, tested)
NOTES: dict[str, str] = {
    "mixtral": "a float64 checkpoint needs experts_implementation='eager' (the default MoE kernel takes fp32/bf16)",
    "distilbert": "steering KL needs the tokenizer's mask token (no KL without one)",
    "roberta": "steering KL needs the tokenizer's mask token (no KL without one)",
    "xlm-roberta": "steering KL needs the tokenizer's mask token (no KL without one)",
    "opt": "OPT-350m (word_embed_proj_dim != hidden_size, project_in/out) is refused",
    "albert": "shared layers: untie_last gives the steered layer its own weights",
    "falcon": "Q/K/V storage by config: grouped (new_decoder_architecture), fused (multi_query), interleaved; "
              "alibi=True is refused",
    "gpt_bigcode": "Q/K/V storage by config: fused (multi_query), interleaved",
    "bloom": "apply_residual_connection_post_layernorm=True is refused",
}


@dataclasses.dataclass(frozen=True)
class FamilyInfo:
    model_type: str
    heads: str  # "multi-head", "grouped-query", "multi-query / multi-head"
    positions: str
    norm: str
    residual: str
    qkv_layout: str
    features: tuple[str, ...]
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _heads(adapter) -> str:
    if not isinstance(adapter, DeclaredAdapter) or adapter.family.n_kv_heads is None:
        return "multi-head"
    if callable(adapter.family.n_kv_heads):
        return "multi-query / multi-head"
    return "grouped-query"


def supported_families() -> list[FamilyInfo]:
    """One entry per registered ``model_type``, sorted by name."""
    from transformers import CONFIG_MAPPING
    from transformers.utils import logging as hf_logging

    out = []
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # default configs of some families warn about their own token ids
    try:
        adapters = {t: ADAPTERS[t](CONFIG_MAPPING[t]()) for t in sorted(ADAPTERS)}
    finally:
        hf_logging.set_verbosity(verbosity)
    for model_type, adapter in adapters.items():
        out.append(FamilyInfo(
            model_type=model_type, heads=_heads(adapter), positions=adapter.position_kind, norm=adapter.norm_kind,
            residual=adapter.residual, qkv_layout=adapter.qkv_layout, features=FEATURES,
            note=NOTES.get(model_type, ""),
        ))
    return out


def markdown_table(families: list[FamilyInfo] | None = None) -> str:
    """The families (default every supported one) as a Markdown table (``steerformer models``)."""
    rows = ["| model_type | heads | positions | norm | residual | Q/K/V storage | features | note |",
            "|---|---|---|---|---|---|---|---|"]
    for f in families or supported_families():
        rows.append(f"| `{f.model_type}` | {f.heads} | {f.positions} | {f.norm} | {f.residual} | {f.qkv_layout} | "
                    f"{'all' if f.features == FEATURES else ', '.join(f.features)} | {f.note} |")
    return "\n".join(rows)
