"""Grouped-query lazy extraction (issue 10) on a Llama-3-8B-shaped attention stack with random
weights: d = 4096, 32 heads, 8 KV heads, head_dim 128, 32 layers, tiny FFN (16) and vocabulary
(256), bf16, sharded (≈ 2.7 GB on disk, generated once under benchmarks/.cache/).

(a) peak RSS of lazy ``layer_matrices`` ÷ checkpoint size (target ≤ 0.25), in a fresh process:
    one layer per call (the streaming working set: one layer's v/o tensors + its F), and the
    whole stack in one call (its float32 result alone is 32·4096²·4 B = 2 GiB, so that ratio
    cannot meet the target; it is printed for the record).
(b) lazy time ÷ reading the same v/o tensors with ``safetensors.safe_open`` (and converting them
    to float32, as any use must), same process, page cache warm for both: the factors A, B of every
    layer in float32 (``layer_matrices(..., form=False)``: F = A B never formed, what the factored
    spectra need; target ≤ 1.2), and ``layer_matrices`` forming F (2·d·r·d flops per layer).

Run: python benchmarks/bench_families.py [--layers 32] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import CACHE, SMOKE_HELP, peak_rss_mib  # noqa: E402

SHAPE = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=16,
             vocab_size=256, max_position_embeddings=8192)


def llama3_8b_shaped(n_layers: int = 32, seed: int = 0):
    """The checkpoint (LlamaModel keys, bf16, one shard per 4 layers), written tensor by tensor so
    generating it never holds more than one shard in memory."""
    from pathlib import Path

    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    path = Path(CACHE) / f"llama3-8b-shaped-{n_layers}L" if SHAPE["hidden_size"] == 4096 else \
        Path(CACHE) / f"llama-shaped-{SHAPE['hidden_size']}d-{n_layers}L"
    if (path / "model.safetensors.index.json").is_file():
        return path
    tmp = path.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = LlamaConfig(**SHAPE, num_hidden_layers=n_layers, dtype="bfloat16", architectures=["LlamaModel"])
    cfg.save_pretrained(tmp)
    g = torch.Generator().manual_seed(seed)
    d, H, G, dh = SHAPE["hidden_size"], SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"], SHAPE["head_dim"]
    ff = SHAPE["intermediate_size"]

    def rnd(*shape):
        return (torch.randn(shape, generator=g) / d ** 0.5).to(torch.bfloat16)

    weight_map, shard, n_shards = {}, {}, (n_layers + 3) // 4
    for i in range(n_layers):
        p = f"layers.{i}"
        shard.update({
            f"{p}.self_attn.q_proj.weight": rnd(H * dh, d), f"{p}.self_attn.k_proj.weight": rnd(G * dh, d),
            f"{p}.self_attn.v_proj.weight": rnd(G * dh, d), f"{p}.self_attn.o_proj.weight": rnd(d, H * dh),
            f"{p}.mlp.gate_proj.weight": rnd(ff, d), f"{p}.mlp.up_proj.weight": rnd(ff, d),
            f"{p}.mlp.down_proj.weight": rnd(d, ff),
            f"{p}.input_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
            f"{p}.post_attention_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
        })
        if i % 4 == 3 or i == n_layers - 1:
            if i == n_layers - 1:
                shard["embed_tokens.weight"] = rnd(SHAPE["vocab_size"], d)
                shard["norm.weight"] = torch.ones(d, dtype=torch.bfloat16)
            name = f"model-{i // 4 + 1:05d}-of-{n_shards:05d}.safetensors"
            save_file(shard, str(tmp / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
            shard = {}
    (tmp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    tmp.rename(path)
    return path


def read_vo(path, n_layers: int) -> float:
    """Seconds to read every layer's v_proj and o_proj with safe_open (the I/O floor)."""
    from safetensors import safe_open

    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    t = time.perf_counter()
    handles = {}
    total = 0
    for i in range(n_layers):
        for key in (f"layers.{i}.self_attn.v_proj.weight", f"layers.{i}.self_attn.o_proj.weight"):
            f = index[key]
            if f not in handles:
                handles[f] = safe_open(str(path / f), framework="pt")
            total += handles[f].get_tensor(key).float().sum().item() != 0  # touch every byte
    return time.perf_counter() - t


def rss(path, L: int, size: int) -> None:
    """(a): peak RSS in fresh processes."""
    base = peak_rss_mib("""
        import sys, torch, steerformer.matrices
        from steerformer.loading import open_source
        open_source(sys.argv[1])  # imports transformers and reads the config
    """, str(path))
    per_layer = peak_rss_mib("""
        import sys, torch
        from steerformer import layer_matrices
        from steerformer.loading import open_source
        src = open_source(sys.argv[1])
        for k in range(int(sys.argv[2])):
            F = layer_matrices(src, [k], dtype=torch.float32).matrices
            del F
    """, str(path), str(L))
    whole = peak_rss_mib("""
        import sys, torch
        from steerformer import layer_matrices
        F = layer_matrices(sys.argv[1], dtype=torch.float32).matrices
    """, str(path))
    mib = size / 2**20
    print(f"(a) peak RSS: imports + open_source alone {base:.0f} MiB; one layer per call {per_layer:.0f} MiB -> ratio "
          f"{per_layer / mib:.3f} (above that baseline {(per_layer - base) / mib:.3f}); whole stack in one call "
          f"{whole:.0f} MiB -> {whole / mib:.3f} (its result alone is {L * 4096 * 4096 * 4 / 2**20:.0f} MiB)  "
          f"(target <= 0.25)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--skip-rss", action="store_true", help="only (b), the timing")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP + " (2 layers, d=256, 8 heads, 2 KV heads)")
    args = ap.parse_args()
    import torch

    from steerformer import layer_matrices
    from steerformer.loading import open_source

    L = 2 if args.smoke else args.layers
    if args.smoke:
        SHAPE.update(hidden_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=32)
    path = llama3_8b_shaped(L)
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    print(f"checkpoint: {path} ({size / 2**30:.2f} GiB, {L} layers), torch threads={torch.get_num_threads()}")
    if not (args.skip_rss or args.smoke):
        rss(path, L, size)

    read_vo(path, L)  # warm the page cache for both
    src = open_source(path)
    t_io, t_AB = [], []
    for _ in range(1 if args.smoke else 3):  # alternated: machine-load drift shows as a spread, not a bias
        t_io.append(read_vo(path, L))
        t = time.perf_counter()
        layer_matrices(src, dtype=torch.float32, form=False)
        t_AB.append(time.perf_counter() - t)
    t = time.perf_counter()
    for k in range(L):
        layer_matrices(src, [k], dtype=torch.float32)
    t_F = time.perf_counter() - t
    io, ab = min(t_io), min(t_AB)
    print(f"(b) safe_open v/o read + float32 {io:.2f} s (runs {', '.join(f'{x:.2f}' for x in t_io)}); factors A, B "
          f"of every layer {ab:.2f} s (runs {', '.join(f'{x:.2f}' for x in t_AB)}) -> ratio {ab / io:.2f} "
          f"(target <= 1.2); layer_matrices (F formed, float32, 2·d·r·d flops/layer) {t_F:.2f} s -> ratio "
          f"{t_F / io:.2f}")


if __name__ == "__main__":
    main()
