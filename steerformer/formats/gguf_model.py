"""A (steered) model as a GGUF file for llama.cpp and Ollama, in f16 or bf16.

``write_gguf_model(model, "out.gguf", source="model.Q4_1.gguf", dtype="f16")`` keeps everything
the source GGUF says about the model — tokenizer, chat template, hyperparameters, rotary factors —
and replaces every weight tensor with the given model's, so an edited (steered) model runs in
llama.cpp with the tokenizer llama.cpp already knows. Per tensor, as llama.cpp's
``convert_hf_to_gguf.py`` writes an f16/bf16 file:

- names: transformers parameter name → GGUF name through the ``gguf`` package's tensor name map
  for the architecture (``model.layers.3.self_attn.q_proj.weight`` → ``blk.3.attn_q.weight``);
- Llama Q/K rows permuted per head for llama.cpp's rotary kernel (``adapters/runtimes.py``
  ``GGUFLayout.permute_qk``): transformers' GGUF loader un-permutes them, so a file written
  without it would load with scrambled attention;
- 1-D tensors (norms, biases) in float32, matrices in the chosen dtype (f16 rounds to nearest,
  bf16 to nearest-even, as ``torch.Tensor.to`` does); ``general.file_type`` set to match;
- tensors llama.cpp derives and transformers has no parameter for (``rope_freqs``) copied as they are.

A source whose architecture, layer count, width or head counts differ from the model's is refused,
as is a model with a weight the source has no place for (e.g. an untied ``lm_head`` where the source
ties it). The file is written to a temporary sibling and moved into place; an existing file is
replaced only with ``overwrite=True`` and only when steerformer wrote it.

Without a source GGUF the file is refused (one line): llama.cpp picks its pre-tokenizer from
``tokenizer.ggml.pre``, a name its converter assigns by hashing the tokenizer's output against a
table that lives in llama.cpp's ``convert_hf_to_gguf.py``, not in the ``gguf`` package; written
without it, llama.cpp tokenizes with its default split and quietly differs from the model.
Save the checkpoint and run llama.cpp's converter on it instead (docs/ecosystem.md).

Read back with transformers: ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)``
dequantizes into plain ``nn.Linear`` weights (its ``hf_quantizer`` is set, so ``save_pretrained``
refuses the model although nothing in it is quantized).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..adapters.runtimes import GGUF_LAYOUTS
from ..errors import bad_argument
from ..outputs import write_output_file
from ..version import __version__
from .gguf_file import GGUF_OUTPUT, WRITTEN_BY, check_target_file, check_written, field_value, open_gguf

#: dtype name -> (GGML tensor type name, llama.cpp file type name)
DTYPES = {"f16": ("F16", "MOSTLY_F16"), "bf16": ("BF16", "MOSTLY_BF16")}
#: hyperparameters that must agree: GGUF key (after "<arch>.") -> config attribute
_SHAPE_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
               "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
               "feed_forward_length": "intermediate_size"}
_QK = re.compile(r"^blk\.\d+\.attn_[qk]\.(weight|bias)$")


def permute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """transformers' rotate-half row order → llama.cpp's interleaved order, per head: rows
    (head, half, i) become (head, i, half) (``LlamaModel.permute`` in llama.cpp's converter; the
    inverse of transformers' ``_reverse_permute_weights``). ``n_heads``: the query heads for Q,
    the KV heads for K. Works for a weight (rows × d) and a bias (rows,)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def gguf_names(model: Any, arch: str) -> dict[str, str]:
    """GGUF tensor name -> the model's ``state_dict`` key, through the ``gguf`` package's name map
    (as transformers' ``get_gguf_hf_weights_map`` reads it, in reverse)."""
    import gguf

    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    name_map = gguf.get_tensor_name_map(arch_id, int(model.config.num_hidden_layers))
    out: dict[str, str] = {}
    for key in model.state_dict():
        stem, _, suffix = key.rpartition(".")
        name = name_map.get_name(stem)
        if name is not None:
            out.setdefault(f"{name}.{suffix}", key)
    return out


def _check_source(reader: Any, config: Any, arch: str, source: str) -> None:
    got = field_value(reader, "general.architecture")
    if got != arch:
        raise bad_argument("source", source, f"a GGUF of architecture {arch!r} for this {config.model_type} model, "
                           f"not {got!r}", "Pass the GGUF the model was converted from.")
    for key, attr in _SHAPE_KEYS.items():
        value = field_value(reader, f"{arch}.{key}")
        want = getattr(config, attr, None)
        if value is not None and want is not None and int(value) != int(want):
            raise bad_argument("source", source, f"a GGUF of this model's shape: its {arch}.{key} = {value}, the "
                               f"model's {attr} = {want}", "Pass the GGUF the model was converted from.")


def _tensor_bytes(w: torch.Tensor, dtype: str) -> tuple[np.ndarray, Any]:
    """(array, GGML type) for the writer: float32 for 1-D tensors, else f16 or bf16 (bf16 as raw
    uint8 bytes, which numpy has no type for)."""
    from gguf import GGMLQuantizationType

    if w.ndim <= 1:
        return w.to(torch.float32).numpy(), GGMLQuantizationType.F32
    if dtype == "f16":
        return w.to(torch.float16).numpy(), GGMLQuantizationType.F16
    raw = w.to(torch.bfloat16).contiguous().view(torch.uint8).numpy()  # (..., 2·cols) little-endian bytes
    return raw, GGMLQuantizationType.BF16


def _copy_metadata(writer: Any, reader: Any, file_type: int) -> None:
    """Every key of the source except the ones the writer owns or this file changes."""
    from gguf import GGUFValueType

    skip = {"general.architecture", "general.file_type", "general.alignment", WRITTEN_BY}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in skip:
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == GGUFValueType.STRING:  # raw bytes: a token need not be valid UTF-8
                value = [bytes(field.parts[i]) for i in field.data]
            else:
                value = field.contents()
            if value:  # the writer cannot write an empty array; llama.cpp treats absent and empty alike
                writer.add_key_value(name, value, kind, sub_type=sub)
        elif kind == GGUFValueType.STRING:
            writer.add_key_value(name, bytes(field.parts[-1]), kind)
        else:
            writer.add_key_value(name, field.contents(), kind)
    writer.add_uint32("general.file_type", file_type)


def write_gguf_model(model: Any, path: str | os.PathLike, *, source: str | os.PathLike | None = None,
                     dtype: str = "f16", overwrite: bool = False, name: str = "path") -> Path:
    """Write ``model``'s weights as a GGUF for llama.cpp / Ollama with ``source``'s metadata
    (module doc); returns the path. ``dtype``: "f16" or "bf16"; ``name``: the argument errors about
    ``path`` name (a full disk, another writer holding it)."""
    import gguf

    if dtype not in DTYPES:
        raise bad_argument("dtype", dtype, f"one of {sorted(DTYPES)}", "llama.cpp quantizes further itself "
                           "(llama-quantize).")
    config = model.config
    layout = GGUF_LAYOUTS.get(config.model_type)
    if layout is None:
        raise bad_argument("model", config.model_type, f"a family whose GGUF layout steerformer declares "
                           f"({', '.join(sorted(GGUF_LAYOUTS))})", "Save the checkpoint and convert it with "
                           "llama.cpp's convert_hf_to_gguf.py.")
    if source is None:
        raise bad_argument("source", None, "the model's own GGUF (its tokenizer metadata, tokenizer.ggml.pre, "
                           "comes only from llama.cpp's converter)", "Pass source=<the GGUF the model came from>, or "
                           "save the checkpoint and run llama.cpp's convert_hf_to_gguf.py --outtype f16 on it.")
    if Path(source).expanduser().resolve() == Path(path).expanduser().resolve():
        raise bad_argument(name, str(path), "a file other than the source GGUF", "Pass a new file name.")
    inputs = [source, getattr(config, "_name_or_path", None)]
    target = check_target_file(path, overwrite, name=name, inputs=inputs)
    reader = open_gguf(source, name="source", what="a model GGUF")
    _check_source(reader, config, layout.arch, str(source))

    names = gguf_names(model, layout.arch)
    state = model.state_dict()
    heads = {"attn_q": int(config.num_attention_heads),
             "attn_k": int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)}
    file_type = DTYPES[dtype][1]
    planned: list[tuple[str, np.ndarray, Any]] = []
    for t in reader.tensors:
        key = names.get(t.name)
        if key is None:  # derived by llama.cpp's converter (rope_freqs): no transformers parameter
            planned.append((t.name, np.array(t.data), t.tensor_type))
            continue
        w = state[key].detach().to("cpu", torch.float32)
        if layout.permute_qk and _QK.match(t.name):
            w = permute_qk(w, heads[t.name.split(".")[2]])
        shape = tuple(int(s) for s in reversed(t.shape.tolist()))  # GGUF lists the innermost dimension first
        if tuple(w.shape) != shape:
            raise bad_argument("source", str(source), f"tensors shaped like the model's; {t.name} is {shape}, the "
                               f"model's {key} is {tuple(w.shape)}", "Pass the GGUF the model was converted from.")
        planned.append((t.name, *_tensor_bytes(w, dtype)))
    written = {t.name for t in reader.tensors}
    embed = names.get("token_embd.weight")
    for gname, key in names.items():
        if gname in written:
            continue
        tied = gname == "output.weight" and embed is not None and torch.equal(state[key], state[embed])
        if not tied:
            raise bad_argument("source", str(source), f"a GGUF with a place for every weight of the model; it has no "
                               f"{gname} for {key}", "Pass the GGUF the model was converted from, or keep that "
                               "weight tied / unedited.")

    def write(tmp: Path) -> None:
        writer = gguf.GGUFWriter(str(tmp), layout.arch)
        alignment = field_value(reader, "general.alignment")
        if alignment is not None:
            writer.data_alignment = int(alignment)
            writer.add_custom_alignment(int(alignment))
        _copy_metadata(writer, reader, int(gguf.LlamaFileType[file_type]))
        writer.add_string(WRITTEN_BY, f"steerformer {__version__}")
        for tname, array, ggml_type in planned:
            writer.add_tensor(tname, array, raw_dtype=ggml_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        check_written(tmp)  # a short write the gguf writer lost (ulimit -f, a full disk)

    # the writer lock, the rules again under it, a killed writer's temporary removed, a full disk one line
    return write_output_file(target, write, GGUF_OUTPUT, overwrite=overwrite, inputs=inputs, name=name)
