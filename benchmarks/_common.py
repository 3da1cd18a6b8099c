"""Shared benchmark helpers: random-weight checkpoints of real sizes, cached on disk, and peak RSS
of a piece of code measured in a fresh subprocess (so imports and earlier work don't pollute it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: Generated checkpoints, kept between runs (the smoke tests point it at a temporary folder).
CACHE = Path(os.environ.get("STEERFORMER_BENCH_CACHE") or Path(__file__).resolve().parent / ".cache")
#: The steerformer command of this checkout (the `steerformer` on PATH may be another install).
CLI = [sys.executable, "-c", "import sys; from steerformer_cli.main import app; sys.argv[0] = 'steerformer'; app()"]
SMOKE_HELP = "tiny sizes, seconds: what the test suite runs (tests/benchmarks/test_smoke.py) so the script cannot rot"


def tiny_gpt2(n_layer: int = 2, n_embd: int = 64, n_head: int = 4, seed: int = 0) -> Path:
    """A small random GPT2LMHeadModel saved once under :data:`CACHE` (the --smoke sizes)."""
    path = CACHE / f"gpt2-{n_layer}L-{n_embd}d-{n_head}h"
    if (path / "config.json").is_file() and list(path.glob("*.safetensors")):
        return path
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_positions=128, vocab_size=256,
                                           bos_token_id=0, eos_token_id=0))
    tmp = path.with_suffix(".tmp")
    model.save_pretrained(tmp)
    tmp.rename(path)
    return path


def gpt2_medium_random(seed: int = 0) -> Path:
    """A gpt2-medium-sized GPT2LMHeadModel (24 layers, d=1024, 16 heads) with random weights,
    saved once as safetensors under benchmarks/.cache/."""
    path = CACHE / "gpt2-medium-random"
    if (path / "config.json").is_file() and list(path.glob("*.safetensors")):
        return path
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257))
    tmp = path.with_suffix(".tmp")
    model.save_pretrained(tmp)
    tmp.rename(path)
    return path


def peak_rss_mib(code: str, *args: str) -> float:
    """Peak resident memory (MiB) of a fresh Python process running ``code`` (``sys.argv[1:]`` =
    ``args``).

    Read from /proc/self/status VmHWM, not ``getrusage``: Linux carries ru_maxrss across
    fork+exec, so a child of a big benchmark process would report the parent's peak.
    """
    wrapper = textwrap.dedent(code) + textwrap.dedent("""
        import json
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        print("__RSS__" + json.dumps(int(hwm) / 1024))
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True, env=env, check=True)
    line = [l for l in out.stdout.splitlines() if l.startswith("__RSS__")][-1]
    return float(json.loads(line[len("__RSS__"):]))
