"""llama.cpp control vectors (GGUF): per-layer directions that llama.cpp and Ollama add to the
residual stream (docs/math.md §5e; docs/ecosystem.md).

The file, as llama.cpp's ``cvector-generator`` and repeng's ``ControlVector.export_gguf`` write it:

    general.architecture       "controlvector"
    controlvector.model_hint   the model's architecture name ("llama", "qwen2", ...)
    controlvector.layer_count  how many direction tensors the file holds
    direction.N                one 1-D float32 tensor of length d_model per layer, N >= 1

Which layer ``direction.N`` steers (read from llama.cpp, not guessed):

- ``common_control_vector_load_one`` (common/common.cpp) stores ``direction.N`` at offset
  ``n_embd·(N − 1)`` of one flat buffer and refuses ``direction.0`` ("invalid (zero) direction
  tensor layer index"); ``llama_adapter_cvec::apply`` (src/llama-adapter.cpp) fills layer
  ``il`` from offset ``n_embd·(il − 1)`` for ``il = 1 … n_layer − 1``. The two offsets cancel:
  **direction.N is applied at llama.cpp layer il = N** (0-based, as ``blk.N`` in the model GGUF).
- Each model graph (e.g. src/models/llama.cpp) calls ``build_cvec(cur, il)`` right after the
  FFN residual add, before the tensor it names ``l_out``: the vector is **added to the output of
  block N**, the state block N + 1 reads.
- In transformers that state is ``model.model.layers[N]``'s output, i.e.
  ``output_hidden_states[N + 1]`` (``hidden_states[0]`` is the embedding) — the off-by-one. For
  the last block, N = n_layer − 1, llama.cpp adds before the final norm while transformers'
  last ``hidden_states`` entry is after it.
- steerformer's layer ℓ is "the output of block ℓ" (``steering/contrastive.py``), so **file
  direction.N = steerformer layer N** and the keys of :attr:`ControlVector.directions` are N.
  repeng agrees: its ``directions[N]`` is read from ``hidden_states[N + 1]`` and added to the
  output of ``layers[N]`` by its ``ControlModule``, and ``export_gguf`` writes it as
  ``direction.N``. Block 0 cannot be steered by a file (repeng's default layers skip it too).
- llama.cpp's own ``cvector-generator`` computes each vector from ``l_out`` of layer N − 1 and
  names it ``direction.N``: its files are applied one block after the state they were read from.

llama.cpp sums the files it is given and skips layers a file lacks (zeros); it reads no metadata
key. Reading here is stricter: a file that is not a control vector, a ``direction.0``, a tensor
that is not 1-D float32, widths that differ, or a ``layer_count`` that does not match the tensors
is refused with one line.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import torch

from ..adapters import get_adapter
from ..configs import is_whole
from ..errors import bad_argument
from ..outputs import write_output_file
from ..schemas import ControlVectorMetadata, checked
from ..version import __version__
from .gguf_file import GGUF_OUTPUT, WRITTEN_BY, check_target_file, check_written, field_value, open_gguf

ARCH = "controlvector"
MODEL_HINT = f"{ARCH}.model_hint"
LAYER_COUNT = f"{ARCH}.layer_count"
#: prefix of the notes steerformer writes (llama.cpp reads no metadata key; people and tools do):
#: ``steerformer.note.scale`` says what strength 1.0 means for the vectors of the file
NOTE_PREFIX = "steerformer.note."

#: transformers ``model_type`` -> llama.cpp's ``general.architecture``, where they differ
#: (llama.cpp's convert_hf_to_gguf.py: Mistral is written as llama, GPT-NeoX as gptneox, ...)
_LLAMA_CPP_ARCH = {"mistral": "llama", "gpt_neox": "gptneox", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe",
                   "gpt_bigcode": "starcoder", "stablelm": "stablelm", "phi": "phi2", "gpt_neo": "gptneo"}


def model_hint_of(model_type: str) -> str:
    """llama.cpp's architecture name (``controlvector.model_hint``) of a transformers model type:
    the same name for most ("llama", "qwen2", "gemma2", "gpt2", "bert"), the converter's rename
    for the others ("mistral" -> "llama")."""
    return _LLAMA_CPP_ARCH.get(model_type, model_type)
_NAME = re.compile(r"^direction\.([0-9]+)$")  # ASCII digits: "direction.²" is no layer


#: llama.cpp compares the hint with the model's architecture name ("llama", "qwen2"): a short word.
MAX_MODEL_HINT_CHARS = 64


def check_model_hint(hint: Any, name: str = "model_hint") -> str:
    """``hint`` as a control vector's model hint: a llama.cpp architecture name — 1 to
    :data:`MAX_MODEL_HINT_CHARS` characters of letters, digits, '-', '_' or '.'."""
    if not isinstance(hint, str) or re.fullmatch(r"[A-Za-z0-9._-]{1,%d}" % MAX_MODEL_HINT_CHARS, hint) is None:
        raise bad_argument(name, hint if not isinstance(hint, str) or len(hint) < 80 else hint[:40] + "...",
                           f"a llama.cpp architecture name such as 'llama' or 'qwen2' (letters, digits, '-', '_', "
                           f"'.'; at most {MAX_MODEL_HINT_CHARS} characters)",
                           "llama.cpp refuses a control vector whose hint is not the model's architecture.")
    return hint


@dataclasses.dataclass(frozen=True, eq=False)  # tensors have no truth value: compare .directions yourself
class ControlVector:
    """Per-layer steering vectors in llama.cpp's numbering: ``directions[N]`` (N >= 1, float32,
    length d_model) is added to the output of decoder block N — steerformer's layer N,
    transformers' ``hidden_states[N + 1]`` (module doc). Not normalized: llama.cpp adds the stored
    vector times the strength the user gives (``--control-vector-scaled FILE S``)."""

    directions: Mapping[int, torch.Tensor]
    model_hint: str | None = None
    #: notes written as ``steerformer.note.<key>`` strings (e.g. ``scale``: what strength 1.0 means)
    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "directions", _checked_directions(self.directions))
        if self.model_hint is not None:
            check_model_hint(self.model_hint)
        object.__setattr__(self, "notes", {str(k): str(v) for k, v in dict(self.notes or {}).items()})

    @classmethod
    def from_direction(cls, vector: Any, layers: Iterable[int], model_hint: str | None = None) -> "ControlVector":
        """One vector added at every layer in ``layers`` (each >= 1)."""
        return cls({int(n): vector for n in layers}, model_hint)

    @property
    def d_model(self) -> int:
        return int(next(iter(self.directions.values())).shape[0])

    @property
    def layers(self) -> list[int]:
        return sorted(self.directions)

    def vector(self, layer: int) -> torch.Tensor:
        """The vector added after block ``layer``; an error naming the layers held if absent."""
        if layer not in self.directions:
            raise bad_argument("layer", layer, f"one of the layers this control vector holds ({_span(self.layers)})",
                               "llama.cpp adds nothing at a layer a file lacks; pick a held layer.")
        return self.directions[layer]

    def check_model(self, config: Any, name: str = "control_vector") -> None:
        """Refuse a vector whose width differs from the model's, or a layer the model lacks.
        ``config``: a transformers config or model (its ``config``)."""
        adapter = get_adapter(getattr(config, "config", config))
        if self.d_model != adapter.d_model:
            raise bad_argument(name, f"d={self.d_model}", f"a control vector of the model's width d_model="
                               f"{adapter.d_model} ({adapter.model_type})",
                               "Use a control vector made for this model.")
        beyond = [n for n in self.layers if n >= adapter.n_layers]
        if beyond:
            raise bad_argument(name, f"direction.{beyond[0]}", f"layers 1..{adapter.n_layers - 1}: the model has "
                               f"{adapter.n_layers} blocks (0..{adapter.n_layers - 1}) and llama.cpp ignores the rest",
                               "Drop those layers or use the control vector of a deeper model.")

    def save(self, path: str | os.PathLike, *, overwrite: bool = False, name: str = "path") -> Path:
        """Write llama.cpp's control-vector GGUF (module doc) atomically; returns the path. ``name``:
        the argument errors about ``path`` name."""
        return write_control_vector(path, self, overwrite=overwrite, name=name)

    @classmethod
    def load(cls, path: str | os.PathLike, *, name: str = "path") -> "ControlVector":
        """Read a llama.cpp or repeng control-vector GGUF (:func:`read_control_vector`)."""
        return read_control_vector(path, name=name)


def _span(layers: list[int]) -> str:
    if layers and layers == list(range(layers[0], layers[-1] + 1)):
        return f"{layers[0]}..{layers[-1]}"
    return ", ".join(map(str, layers))


def _checked_directions(directions: Mapping[int, Any]) -> dict[int, torch.Tensor]:
    if not isinstance(directions, Mapping) or not directions:
        raise bad_argument("directions", type(directions).__name__, "a non-empty mapping layer -> vector",
                           "Pass {layer: vector, ...} or use ControlVector.from_direction.")
    bad = [k for k in directions if not is_whole(k)]
    if bad:  # typed before anything is read from them ("a" was int()'s ValueError, True was layer 1)
        raise bad_argument("directions", {bad[0]: "..."}, "whole-number layer keys N >= 1 (direction.N is added "
                           "after block N)", "Pass {layer: vector, ...} with int keys, e.g. {12: v}.")
    out: dict[int, torch.Tensor] = {}
    width = None
    for layer, vec in sorted(directions.items()):
        if int(layer) < 1:
            raise bad_argument("layers", int(layer), "layers >= 1: direction.N is added after block N, and llama.cpp "
                               "refuses direction.0 (block 0's output cannot be steered by a control vector)",
                               "Drop layer 0, or steer layer 1 (the output of the second block).")
        t = torch.as_tensor(vec.detach().cpu() if isinstance(vec, torch.Tensor) else np.asarray(vec))
        if t.ndim != 1 or not t.is_floating_point() or t.numel() == 0:
            raise bad_argument(f"directions[{layer}]", tuple(t.shape), "a 1-D float vector of length d_model",
                               "Pass one vector per layer.")
        if width is not None and t.numel() != width:
            raise bad_argument(f"directions[{layer}]", f"length {t.numel()}", f"length {width} like the other layers",
                               "All vectors of one control vector have the model's width.")
        if not torch.isfinite(t).all():
            raise bad_argument(f"directions[{layer}]", "non-finite entries", "finite numbers", None)
        width = t.numel()
        out[int(layer)] = t.to(torch.float32, copy=True).contiguous()  # never a view of the caller's array
    return out


def write_control_vector(path: str | os.PathLike, control: ControlVector | Mapping[int, Any], *,
                         model_hint: str | None = None, overwrite: bool = False, name: str = "path") -> Path:
    """Write ``control`` (a :class:`ControlVector`, or ``{layer: vector}`` with ``model_hint``) as
    llama.cpp's control-vector GGUF. ``direction.N`` is added after block N (module doc)."""
    import gguf

    if not isinstance(control, ControlVector):
        control = ControlVector(control, model_hint)
    hint = control.model_hint if model_hint is None else model_hint
    if not hint:
        raise bad_argument("model_hint", hint, "the model's architecture name (llama.cpp's general.architecture, "
                           "e.g. 'llama')", "Pass model_hint=...; llama.cpp does not check it, repeng needs it.")
    target = check_target_file(path, overwrite, name=name)

    def write(tmp: Path) -> None:
        writer = gguf.GGUFWriter(str(tmp), ARCH)
        writer.add_string(MODEL_HINT, hint)
        # int32, as llama.cpp's cvector-generator writes it (repeng writes uint32; both read back)
        writer.add_int32(LAYER_COUNT, len(control.directions))
        writer.add_string(WRITTEN_BY, f"steerformer {__version__}")
        for key, text in sorted(control.notes.items()):
            writer.add_string(NOTE_PREFIX + key, text)
        for layer in control.layers:
            writer.add_tensor(f"direction.{layer}", control.directions[layer].numpy())
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        check_written(tmp)  # a short write the gguf writer lost (ulimit -f, a full disk)

    # the writer lock, the rules again under it, a killed writer's temporary removed, a full disk one line
    return write_output_file(target, write, GGUF_OUTPUT, overwrite=overwrite, name=name)


#: No model has more blocks: a larger N in direction.N is a corrupt or hostile file.
MAX_LAYER = 100_000


def read_control_vector(path: str | os.PathLike, *, name: str = "path") -> ControlVector:
    """Read a llama.cpp or repeng control-vector GGUF as per-layer vectors (module doc); one-line
    errors for a file that is not a control vector, ``direction.0``, or a missing layer; ``name``:
    the argument the errors name (``direction`` when the file is given as a direction)."""
    from gguf import GGMLQuantizationType

    reader = open_gguf(path, name=name, what="a control-vector GGUF")
    arch = field_value(reader, "general.architecture")
    if arch != ARCH:
        raise bad_argument(name, str(path), f"a control vector (general.architecture = '{ARCH}'), but this GGUF "
                           f"is {arch!r}", "A model GGUF is not a control vector; pass the control-vector file.")
    directions: dict[int, np.ndarray] = {}
    for tensor in reader.tensors:
        m = _NAME.match(tensor.name)
        if m is None:
            raise bad_argument(name, str(path), f"tensors named direction.N, not {tensor.name!r}", None)
        n = int(m.group(1))
        if n > MAX_LAYER:  # a 20-digit layer number is no layer of any model
            raise bad_argument(name, str(path), f"direction.N with N a layer number (at most {MAX_LAYER}), not "
                               f"{tensor.name[:40]}", "Renumber the tensor to the block it steers.")
        if n == 0:
            raise bad_argument(name, str(path), "direction.N with N >= 1 (llama.cpp refuses direction.0: block 0's "
                               "output cannot be steered)", "Renumber or drop direction.0.")
        if tensor.tensor_type != GGMLQuantizationType.F32 or len(tensor.shape) != 1:
            raise bad_argument(name, str(path), f"1-D float32 direction tensors; {tensor.name} is "
                               f"{tensor.tensor_type.name} of shape {tuple(int(s) for s in tensor.shape)}", None)
        directions[n] = np.array(tensor.data, dtype=np.float32)
    if not directions:
        raise bad_argument(name, str(path), "at least one direction.N tensor", None)

    def plain(key: str) -> Any:  # numpy scalars as Python values, for the strict schema
        v = field_value(reader, key)
        return v.item() if hasattr(v, "item") else v

    meta = checked({LAYER_COUNT: plain(LAYER_COUNT), MODEL_HINT: plain(MODEL_HINT), NOTE_PREFIX.rstrip("."): {
        key[len(NOTE_PREFIX):]: plain(key) for key in reader.fields if key.startswith(NOTE_PREFIX)}},
        ControlVectorMetadata, path)
    count = meta.layer_count
    if count is not None and int(count) != len(directions):
        raise bad_argument(name, str(path), f"{int(count)} direction tensors as its {LAYER_COUNT} says, but it "
                           f"holds {len(directions)} (layers {_span(sorted(directions))}): a layer is missing", None)
    widths = {v.shape[0] for v in directions.values()}
    if len(widths) > 1:
        raise bad_argument(name, str(path), f"direction tensors of one width, not {sorted(widths)}", None)
    return ControlVector({n: torch.from_numpy(v) for n, v in directions.items()}, meta.model_hint, dict(meta.notes))
