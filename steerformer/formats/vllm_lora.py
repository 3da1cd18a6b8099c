"""Will vLLM serve this LoRA adapter? The checks vLLM's loader makes on ``adapter_config.json``
(``vllm/lora/peft_helper.py``: ``PEFTHelper._validate_features`` and ``validate_legal``; the
target modules against the model class's supported modules, ``adapters/runtimes.py``), made before
anything is served:

- the family has a vLLM model class with LoRA support, and each target module's last name
  component is one that class accepts;
- every rank (``r`` and each ``rank_pattern`` value) is at most the server's ``--max-lora-rank``
  (one of 1, 8, 16, 32, 64, 128, 256, 320, 512; default 16);
- one scale for every module: vLLM reads no ``rank_pattern``/``alpha_pattern`` (each module's rank
  comes from its tensors) and applies ``lora_alpha / r`` everywhere, so a module whose
  ``alpha_pattern / rank_pattern`` differs from it would be scaled differently than PEFT scales it;
- ``bias == "none"`` ("Adapter bias is not supported."), ``lora_bias`` false, no DoRA, no
  ``modules_to_save`` (except a classification head), no aLoRA / layer replication / BD-LoRA /
  QALoRA, and an ``init_lora_weights`` that leaves the base weights alone.

Serving it: ``vllm serve BASE --enable-lora --max-lora-rank R --lora-modules NAME=DIR``, then
``model=NAME`` per request, or ``LoRARequest(NAME, 1, DIR)`` with ``LLM.generate`` (docs/ecosystem.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from ..adapters.runtimes import VLLM_LORA, VLLM_MAX_LORA_RANKS
from ..errors import bad_argument
from ..loading import read_safetensors_file_header

#: ``init_lora_weights`` strings vLLM accepts (they set only the initial adapter weights)
_PLAIN_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")


def vllm_lora_problems(adapter_config: Mapping[str, Any], model_type: str, *, max_lora_rank: int = 16) -> list[str]:
    """Everything in ``adapter_config`` that vLLM's LoRA loader would refuse for a ``model_type``
    model served with ``--max-lora-rank max_lora_rank``; empty when vLLM serves it. A family
    absent from ``adapters.runtimes.VLLM_LORA`` is reported as unchecked."""
    if max_lora_rank not in VLLM_MAX_LORA_RANKS:
        raise bad_argument("max_lora_rank", max_lora_rank, f"one of vLLM's --max-lora-rank values {VLLM_MAX_LORA_RANKS}",
                           None)
    family = VLLM_LORA.get(model_type)
    if family is None:
        return [f"model_type {model_type!r} is not in steerformer's vLLM table (adapters/runtimes.py): unchecked"]
    if family.why:
        return [f"{model_type}: {family.why}"]
    problems = []
    targets = adapter_config.get("target_modules") or []
    if isinstance(targets, str):
        problems.append(f"target_modules is a pattern ({targets!r}); vLLM matches a pattern only of the form "
                        "'...(a|b)$' — list the modules")
        targets = []
    unknown = sorted({t for t in targets if t.rsplit(".", 1)[-1] not in family.modules})
    if unknown:
        problems.append(f"target module(s) {unknown} are not LoRA modules of vLLM's {model_type} "
                        f"(it accepts {', '.join(family.modules)})")
    ranks = [int(adapter_config.get("r", 0)), *(int(k) for k in (adapter_config.get("rank_pattern") or {}).values())]
    if max(ranks) > max_lora_rank:
        problems.append(f"LoRA rank {max(ranks)} is greater than --max-lora-rank {max_lora_rank} "
                        "(serve with a larger --max-lora-rank)")
    r, alpha = int(adapter_config.get("r", 0)) or 1, float(adapter_config.get("lora_alpha", 0))
    rank_pattern, alpha_pattern = adapter_config.get("rank_pattern") or {}, adapter_config.get("alpha_pattern") or {}
    rescaled = sorted(m for m in set(rank_pattern) | set(alpha_pattern)
                      if abs(float(alpha_pattern.get(m, alpha)) / int(rank_pattern.get(m, r)) - alpha / r) > 1e-12)
    if rescaled:
        problems.append(f"module(s) {rescaled} have their own alpha/rank ratio; vLLM reads no rank_pattern/alpha_pattern "
                        f"and scales every module by lora_alpha/r = {alpha / r:g}")
    if adapter_config.get("bias", "none") != "none":
        problems.append(f"bias={adapter_config['bias']!r}: vLLM supports only bias='none' (no adapter bias)")
    if adapter_config.get("lora_bias"):
        problems.append("lora_bias=True: vLLM does not support a bias on lora_B")
    if adapter_config.get("use_dora"):
        problems.append("use_dora=True: vLLM does not support DoRA")
    extra = [m for m in adapter_config.get("modules_to_save") or [] if m not in ("classifier", "score")]
    if extra:
        problems.append(f"modules_to_save={extra}: vLLM supports only a classification head there")
    init = adapter_config.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in _PLAIN_INITS:
        problems.append(f"init_lora_weights={init!r} changes the base weights when loaded: vLLM refuses it")
    for key, what in (("alora_invocation_tokens", "Activated LoRA"), ("layer_replication", "layer_replication"),
                      ("use_bdlora", "block-diagonal LoRA"), ("use_qalora", "QALoRA")):
        if adapter_config.get(key):
            problems.append(f"{key} is set: vLLM does not support {what}")
    return problems


def vllm_adapter_problems(folder: str | os.PathLike, model_type: str, *, max_lora_rank: int = 16) -> list[str]:
    """:func:`vllm_lora_problems` of an adapter folder's ``adapter_config.json``, plus its tensor
    names: each module path must be one of vLLM's model class (``VllmLora.prefix``: an adapter saved
    from the bare base model names modules vLLM's causal-LM class does not have, and vLLM would
    apply none of it)."""
    folder = Path(folder)
    config_path, weights = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    if not config_path.is_file() or not weights.is_file():
        raise bad_argument("folder", str(folder), "a PEFT adapter folder (adapter_config.json and "
                           "adapter_model.safetensors)", "Write one with save_steered(model, dir, format='peft').")
    problems = vllm_lora_problems(json.loads(config_path.read_text()), model_type, max_lora_rank=max_lora_rank)
    family = VLLM_LORA.get(model_type)
    if family is None or family.why:
        return problems
    tensors, _, _ = read_safetensors_file_header(weights)
    paths = sorted({k.removeprefix("base_model.model.").rsplit(".lora_", 1)[0] for k in tensors})
    outside = [p for p in paths if not p.startswith(family.prefix)]
    if outside:
        problems.append(f"module path(s) {outside[:3]} do not start with {family.prefix!r}, the prefix of vLLM's "
                        f"{model_type} model class: the adapter was saved from the bare base model (save it from the "
                        "causal-LM class, e.g. AutoModelForCausalLM), else vLLM applies none of it")
    return problems


def check_vllm_adapter(folder: str | os.PathLike, model_type: str, *, max_lora_rank: int = 16) -> None:
    """Raise one line naming everything vLLM would refuse or mis-apply in an adapter folder
    (:func:`vllm_adapter_problems`); return None when vLLM serves it as PEFT does."""
    problems = vllm_adapter_problems(folder, model_type, max_lora_rank=max_lora_rank)
    if problems:
        raise bad_argument("folder", str(folder), "an adapter vLLM's LoRA loader accepts; " + "; ".join(problems),
                           "Export the merged checkpoint, or change what the message names.")


def check_vllm_lora(adapter_config: Mapping[str, Any], model_type: str, *, max_lora_rank: int = 16) -> None:
    """Raise one line naming every module, rank or bias that vLLM's LoRA loader would refuse
    (:func:`vllm_lora_problems`); return None when vLLM serves the adapter."""
    problems = vllm_lora_problems(adapter_config, model_type, max_lora_rank=max_lora_rank)
    if problems:
        raise bad_argument("adapter_config", f"a {model_type} LoRA", "an adapter vLLM's LoRA loader accepts; "
                           + "; ".join(problems), "Export the merged checkpoint, or change what the message names.")
