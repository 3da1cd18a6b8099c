#!/usr/bin/env bash
# Install torch only when it is missing (demo.sh and test.sh call this first).
# On stock PyPI, `pip install torch` is the default wheel: on Linux x86-64 the CUDA build, several
# GB with its nvidia-* dependencies. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu picks
# the CPU build instead. An installed torch (any build) is kept as it is.
set -euo pipefail
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
if python3 -c "import torch" 2>/dev/null; then
    echo "[setup] torch is installed: kept as it is"
    exit 0
fi
echo "[setup] installing torch ${TORCH_VERSION}"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
    python3 -m pip install --progress-bar off "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
else
    python3 -m pip install --progress-bar off "torch==${TORCH_VERSION}"
fi
