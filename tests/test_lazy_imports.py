"""The lazy paths (reading a checkpoint's weights, steering it on disk) import no model code: their
memory floor."""

from __future__ import annotations

import subprocess
import sys




def test_lazy_paths_import_no_model_code():
    """open_source on a folder, layer_matrices' module and the lazy steering module leave
    transformers' modeling code (torch._dynamo, torch.distributed, scipy.optimize through its
    losses: ~150 MB resident) and matplotlib unimported — the lazy paths' RSS floor."""
    code = (
        "import sys, steerformer\n"
        "steerformer.layer_matrices\n"
        "from steerformer.loading import open_source\n"
        "open_source('minilm')\n"
        "import steerformer.steering.checkpoint\n"
        "print(sorted(m for m in ('transformers.modeling_utils', 'matplotlib', 'scipy.optimize', 'torch._dynamo')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[]"
