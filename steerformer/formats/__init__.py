"""Files other tools read: llama.cpp control vectors and GGUF models (llama.cpp, Ollama), and the
check of a LoRA adapter against what vLLM serves. docs/ecosystem.md maps each tool's calls to
steerformer's."""

from __future__ import annotations

from .control_vector import ControlVector, check_model_hint, model_hint_of, read_control_vector, write_control_vector
from .gguf_file import check_target_file
from .gguf_model import write_gguf_model
from .vllm_lora import check_vllm_adapter, check_vllm_lora, vllm_adapter_problems, vllm_lora_problems

__all__ = ["ControlVector", "check_model_hint", "check_target_file", "model_hint_of", "check_vllm_adapter", "check_vllm_lora", "read_control_vector", "vllm_adapter_problems",
           "vllm_lora_problems", "write_control_vector", "write_gguf_model"]
