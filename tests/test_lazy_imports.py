"""The lazy paths (reading a checkpoint's weights, steering it on disk) import no model code: their
memory floor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


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


ROOT = Path(__file__).resolve().parents[1]

#: ``sf.steer(model, token=..., tokenizer=tok)`` on a tiny GPT-2 with a word-level tokenizer (no chat
#: template), in a fresh interpreter: the steerformer modules it imported, and how often the model's
#: source was opened and its head kind read (counted by the code objects that run, so a moved
#: function is still counted by its name).
_STEER_PROBE = r'''
import collections, json, sys
import torch
torch.set_num_threads(1)
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from tests.models import make_model

words = "the a of to and in is it you that ocean sea water tell me about story write short day".split()
vocab = {"<eos>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(words)}}
t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
t.pre_tokenizer = pre_tokenizers.Whitespace()
tok = PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<eos>", pad_token="<eos>")
model = make_model("gpt2", dtype=torch.float32)
assert not [m for m in sys.modules if m.startswith("steerformer")]  # tests.models imports none

calls = collections.Counter()

def count(frame, event, arg):
    if event == "call" and frame.f_code.co_name in ("open_source", "head_kind"):
        if "steerformer" in frame.f_code.co_filename:
            calls[frame.f_code.co_name] += 1

import steerformer as sf
sys.setprofile(count)
rec = sf.steer(model, token="ocean", tokenizer=tok, report=False)
sys.setprofile(None)
assert rec.edits  # the call really steered
print(json.dumps({"modules": sorted(m for m in sys.modules if m == "steerformer" or m.startswith("steerformer.")),
                  "calls": dict(calls)}))
'''


@pytest.fixture(scope="module")
def steer_probe() -> dict:
    import json
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", _STEER_PROBE], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


#: what publishing, exporting and checking a checkpoint need, and steering a model in memory does not
PUBLISHING = ("hub", "upload", "export", "lora", "verify")


def test_steering_a_causal_lm_imports_no_hub_export_lora_or_verify_code(steer_probe) -> None:
    loaded = set(steer_probe["modules"])
    assert "steerformer.steering.steer" in loaded  # the probe ran the steering code
    bad = sorted(m for m in loaded if m.rsplit(".", 1)[-1] in PUBLISHING or m.startswith("steerformer.formats"))
    assert not bad, bad


def test_steering_a_causal_lm_imports_at_most_35_package_modules(steer_probe) -> None:
    # 30 before the addition became a folder (its package, config.py and weights.py) and the
    # version a leaf module, then the probe room (steering/probe.py); no other method's code and no
    # method's config but its own
    modules = steer_probe["modules"]
    assert len(modules) <= 35, f"{len(modules)} modules: {modules}"
    assert not [m for m in modules if m.startswith(("steerformer.steering.methods.paper",
                                                    "steerformer.steering.methods.ablation"))], modules


def test_steering_a_causal_lm_opens_its_source_and_reads_its_head_kind_once(steer_probe) -> None:
    assert steer_probe["calls"] == {"open_source": 1, "head_kind": 1}
