"""How other runtimes name and store each family, as declared data keyed by ``config.model_type``:
llama.cpp's GGUF architecture and Q/K row order, and the modules vLLM's LoRA loader accepts.

Read from the runtimes' source, not guessed:

- **GGUF.** llama.cpp's ``convert_hf_to_gguf.py`` (``LlamaModel.permute``) reorders the rows of
  ``q_proj`` / ``k_proj`` (weight and bias) per head, from transformers' rotate-half layout to
  llama.cpp's interleaved rotary pairs: rows (head, half, i) → (head, i, half), with the KV head
  count for K. transformers' GGUF loader undoes it for architecture "llama" only
  (``LlamaTensorProcessor``); Mistral checkpoints are written with architecture "llama" too.
- **vLLM LoRA.** A model class that implements ``SupportsLoRA`` accepts a LoRA on every linear
  layer, matched by the last component of the module name (``vllm/lora/utils.py``
  ``get_supported_lora_modules``), plus the HF names its ``packed_modules_mapping`` fuses
  (Llama: ``qkv_proj`` ← q/k/v_proj, ``gate_up_proj`` ← gate/up_proj), plus its
  ``embedding_modules``. vLLM's GPT-2 (``GPT2LMHeadModel(nn.Module, SupportsPP)``) and its
  encoder models implement no ``SupportsLoRA``: ``--enable-lora`` refuses them.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GGUFLayout:
    """How llama.cpp stores one family: its ``general.architecture`` and whether Q/K rows are
    permuted per head for llama.cpp's rotary kernel (module doc)."""

    arch: str
    permute_qk: bool


#: model_type -> GGUF layout, for the families whose GGUF export is tested
GGUF_LAYOUTS: dict[str, GGUFLayout] = {
    "llama": GGUFLayout("llama", permute_qk=True),
}

_LLAMA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj",
                  "gate_up_proj", "embed_tokens", "lm_head")


@dataclasses.dataclass(frozen=True)
class VllmLora:
    """The LoRA target modules vLLM's model class for a family accepts (last name component);
    empty with ``why`` when that class has no LoRA support."""

    modules: tuple[str, ...] = ()
    why: str = ""
    #: how vLLM's model class names the decoder's modules: an adapter's module paths must start
    #: with it (an adapter saved from the bare ``LlamaModel`` says ``layers.0...`` and vLLM, which
    #: serves ``LlamaForCausalLM``'s ``model.layers.0...``, would apply none of it)
    prefix: str = "model."


#: model_type -> what vLLM's LoRA loader accepts (module doc). Families absent here are unchecked.
VLLM_LORA: dict[str, VllmLora] = {
    **{t: VllmLora(_LLAMA_MODULES) for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")},
    "phi3": VllmLora(("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head")),
    "gpt2": VllmLora(why="vLLM's GPT2LMHeadModel implements no SupportsLoRA; serve the merged checkpoint instead"),
    **{t: VllmLora(why="vLLM serves this encoder without LoRA support; serve the merged checkpoint instead")
       for t in ("bert", "roberta", "xlm-roberta")},
}

#: the values vLLM's ``--max-lora-rank`` accepts (``vllm/config/lora.py``, ``MaxLoRARanks``); default 16
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
