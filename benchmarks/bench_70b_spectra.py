"""`analyze --spectra-only` on a Llama-3-70B shape, end to end (issue 18 item 4).

The checkpoint holds only what the spectra read: the value and output projections of 80 layers,
d = 8192, 64 query heads, 8 KV heads, head_dim 128, bf16 (≈ 12 GB), random N(0, 1/d) weights,
generated once under benchmarks/.cache/ (or $STEERFORMER_BENCH_CACHE), one shard per 4 layers.

Prints the wall time of the command (a fresh process: imports, reads, factors, r × r spectra,
report; target ≤ 20 s on a 16-core machine with the file in the page cache) and its ratio to the
I/O floor measured in the same run: reading the same V/O tensors with ``safetensors.safe_open``
and converting them to float32.

Run: python benchmarks/bench_70b_spectra.py [--layers 80] [--device cpu|cuda] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import CACHE, CLI, SMOKE_HELP  # noqa: E402

SHAPE = dict(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, head_dim=128)
SMOKE_SHAPE = dict(hidden_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=32)


def vo_checkpoint(n_layers: int, shape: dict, seed: int = 0) -> Path:
    """The V/O-only Llama checkpoint (LlamaModel keys), written shard by shard."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    d, H, G, dh = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"], shape["head_dim"]
    path = Path(CACHE) / f"llama-vo-{d}d-{H}h-{G}kv-{n_layers}L"
    if (path / "model.safetensors.index.json").is_file():
        return path
    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    LlamaConfig(**shape, num_hidden_layers=n_layers, intermediate_size=16, vocab_size=256, dtype="bfloat16",
                max_position_embeddings=8192, architectures=["LlamaModel"]).save_pretrained(tmp)
    g = torch.Generator().manual_seed(seed)
    weight_map, shard, n_shards = {}, {}, (n_layers + 3) // 4
    for i in range(n_layers):
        for name, rows, cols in (("v_proj", G * dh, d), ("o_proj", d, H * dh)):
            w = torch.empty(rows, cols).normal_(0.0, d ** -0.5, generator=g)
            shard[f"layers.{i}.self_attn.{name}.weight"] = w.to(torch.bfloat16)
        if i % 4 == 3 or i == n_layers - 1:
            fname = f"model-{i // 4 + 1:05d}-of-{n_shards:05d}.safetensors"
            save_file(shard, str(tmp / fname), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, fname))
            shard = {}
    (tmp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    tmp.rename(path)
    return path


def io_floor(path: Path) -> float:
    """Seconds to read every V/O tensor with safe_open and convert it to float32."""
    from safetensors import safe_open

    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    t = time.perf_counter()
    for fname in sorted(set(index.values())):
        with safe_open(str(path / fname), framework="pt") as f:
            for key in f.keys():
                f.get_tensor(key).float()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP + " (2 layers, d = 256)")
    args = ap.parse_args()
    layers = 2 if args.smoke else args.layers
    t = time.perf_counter()
    path = vo_checkpoint(layers, SMOKE_SHAPE if args.smoke else SHAPE)
    size = sum(p.stat().st_size for p in path.glob("*.safetensors"))
    print(f"checkpoint {path} ({size / 1e9:.2f} GB, {layers} layers; ready in {time.perf_counter() - t:.0f} s); "
          f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}", flush=True)
    io_floor(path)  # the page cache warm for both
    floor = io_floor(path)
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        run = subprocess.run([*CLI, "analyze", str(path), "--spectra-only", "--no-plots", "--json", "--device",
                              args.device, "--out", out], capture_output=True, text=True,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
        wall = time.perf_counter() - t
    if run.returncode != 0:
        sys.exit(f"analyze failed:\n{run.stderr[-3000:]}")
    report = json.loads(run.stdout)
    l0 = report["layers"][0]
    print(f"analyze --spectra-only --device {args.device}: {wall:.1f} s wall (target <= 20 s on 16 cores); "
          f"safe_open read + float32 of the same tensors {floor:.1f} s; ratio {wall / floor:.2f}; "
          f"layer 0 lambda1 {l0['lambda1'][0]:.8f}, {l0.get('eig_method', 'full')}")


if __name__ == "__main__":
    main()
