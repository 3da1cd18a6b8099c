"""Files other tools read: llama.cpp control vectors and GGUF models (llama.cpp, Ollama), and the
check of a LoRA adapter against what vLLM serves. docs/ecosystem.md maps each tool's calls to
steerformer's."""

from __future__ import annotations

from .control_vector import ControlVector, read_control_vector, write_control_vector

__all__ = ["ControlVector", "read_control_vector", "write_control_vector"]
