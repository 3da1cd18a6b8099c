"""A steered model on disk: write it (:func:`save_steered`, and :func:`steer_checkpoint` for a
checkpoint edited without loading it), read it back with its chain (:func:`load_model`,
:func:`load_for_steering`, :func:`read_chain`) and undo it (:func:`unsteer_checkpoint`).
Verification is ``verify.py``.

Layout written by :func:`save_steered` (atomic: a temporary sibling folder moved into place):

    config.json, model.safetensors ...   what ``save_pretrained`` writes; ``AutoModel`` loads it
                                          (safetensors metadata key ``steerformer`` holds the records)
    tokenizer files                       when the tokenizer is known
    modules.json, 1_Pooling/ ...          a sentence-transformers model's module stack (``export.py``)
    README.md                             model card (template ``model_cards/steered.md``)
    steerformer/record.json               the chain: every SteeringRecord (with its Edits) in order,
                                          ALBERT untie info, sha256 of every saved tensor (and its
                                          dtype/shape), of every other file and of each original,
                                          and ``record_sha256`` (of this payload)
    steerformer/original.safetensors      the TRUE original of every edited weight (bit-exact undo;
                                          steering a steered checkpoint keeps them, not its weights)

Loading a steered folder with ``steerformer.load_model`` / ``load_for_steering`` re-attaches the
chain (the originals are put in and every edit is replayed, checking each recorded hash, ending on
the loaded bytes), so ``unsteer(model)`` works after a reload.

Steering a checkpoint that does not fit in memory (:func:`steer_checkpoint`, ``steer CKPT --lazy``).
With ``solve="exact"`` and a fixed gain (``gain=`` or ``strength=``) the edit needs no forward pass
(a = wᵀV⁻¹: the method's ``plan_on_disk``), so only V and W_O of the edited layer are read, with the
lazy safetensors reader. The new checkpoint is written next to the old one without ever building the
model: every file is copied byte for byte (kernel-side copies), except the model shards, which get a
new header (the same tensors and offsets plus the chain's metadata copy) followed by their data
streamed unchanged, except the edited tensor's bytes (same dtype and shape, so same size); plus the
provenance ``save_steered`` writes, so ``verify`` and ``unsteer`` work on it as on any steered
checkpoint. Peak memory is the imports plus a few d×d float64 matrices, whatever the checkpoint's
size; the stored weight is bit-identical to the in-memory ``steer(..., solve="exact", gain=...)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import stat
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors.torch import load_file, save_file

from ..configs import SteerConfig
from ..errors import CheckpointError, FileFormatError, SteerformerError, bad_argument
from ..files import copy_side_file, file_kind, side_files
from ..loading import (
    SafetensorsReader, checkpoint_roots, is_pretrained_model, load_config, load_tokenizer, open_source,
    read_safetensors_file_header, resolve_checkpoint,
)
from ..loading import load_model as load_weights
from ..outputs import STEERED, UNSTEERED, clean_stale, write_atomically
from ..results import parse_json
from .chain import Steering, check_last, replay, steering_of, unsteer
from .common import (
    METADATA_KEY, ORIGINAL_FILE, RECORD_FILE, SAFETENSORS_DTYPES, SIDE_DIR, add_safetensors_metadata,
    as_sentence_transformer, chain_payload, file_hashes, inner_model, model_files, payload_sha256,
    read_safetensors_metadata, rewrite_shard, safetensors_hashes, tensor_identities, tensor_sha256,
    tensor_specs, write_chain,
)
from .export import MODULES_FILE, copy_module_stack, model_card, source_folder
from .lora import save_peft_adapter
from .registry import call_options, choose_method, get_method, method_names
from .record import SteeringRecord, build_record

log = logging.getLogger(__name__)


# ---- write ---------------------------------------------------------------------------------------
def save_steered(model: Any, directory: str | os.PathLike, *, overwrite: bool = False, tokenizer: Any = None,
                 card: bool = True, format: str = "checkpoint", lora_rank: int | None = None,
                 name: str = "directory") -> Path:
    """Write the steered ``model`` to ``directory`` as a plain transformers checkpoint with its
    provenance (see module doc). Refuses a non-empty ``directory`` unless ``overwrite``; ``name``:
    the argument an error about ``directory`` names (the CLI's ``out``).
    ``format="peft"``: write only the edits, as a PEFT LoRA adapter folder (``lora.py``);
    ``lora_rank``: the rank of a truncated adapter for edits that are not low-rank (norm-preserving
    ablation), its error reported in the adapter's ``steerformer/record.json`` and card."""
    st_model = as_sentence_transformer(model)  # a SentenceTransformer: save its whole module stack
    if st_model is not None:
        model = inner_model(st_model)
    if format == "peft":  # the edits alone, as a LoRA adapter (docs/math.md §5c)
        return save_peft_adapter(model, directory, overwrite=overwrite, card=card, lora_rank=lora_rank, name=name)
    if format != "checkpoint":
        raise bad_argument("format", format, "'checkpoint' (the whole steered model) or 'peft' (a LoRA adapter)")
    if lora_rank is not None:
        raise bad_argument("lora_rank", lora_rank, "no rank with format='checkpoint' (the checkpoint holds the exact "
                           "weights)", "Pass format='peft' for a LoRA adapter, or drop lora_rank.")
    steering = steering_of(model)
    if steering is None:
        raise bad_argument("model", type(model).__name__, "a model edited by steerformer.steering.steer",
                           "Steer it first, or save it with model.save_pretrained(...).")
    quantizer = quantization_of(model)
    # The weights are written once, from memory, with the record already in their metadata (no
    # read-back to hash them, no rewrite to add it) — when the tensors save_pretrained would write
    # are known (:func:`saved_state_dict`); else save_pretrained writes them and the record is
    # added to their header afterwards. Their hashes are computed while the tokenizer loads.
    weights = saved_state_dict(model) if st_model is None else None
    with ThreadPoolExecutor(max_workers=1) as pool:
        identities = pool.submit(tensor_identities, weights) if weights is not None else None
        tok = load_tokenizer(model, tokenizer)
        originals = {k: v.detach().contiguous().cpu() for k, v in steering.originals.items()}

        def fill(tmp: Path) -> None:
            unmarked = unmarked_gguf(model) if quantizer == "gguf" else contextlib.nullcontext()
            if st_model is not None:
                st_model.save(str(tmp), create_model_card=False)
            else:
                with unmarked:  # config, generation config (and remote code); the weights below when known
                    model.save_pretrained(str(tmp), **({"state_dict": {}} if weights is not None else {}))
                copy_module_stack(model, tmp)  # sentence-transformers files of the source folder, if any
            if weights is not None:
                for st in model_files(tmp):  # save_pretrained's empty weights file, written below in full
                    st.unlink()
            if tok is not None:
                tok.save_pretrained(str(tmp))
            if card:
                model_card(steering.records, untie=steering.untie, model=model, base_folder=source_folder(model),
                           sentence_transformers=(tmp / MODULES_FILE).is_file()).save(str(tmp / "README.md"))
            hashes, specs = identities.result() if identities is not None else (None, None)
            payload = chain_payload(steering.to_dict(), {k: tensor_sha256(v) for k, v in originals.items()},
                                    model_files(tmp), tmp, tensors=hashes, specs=specs)
            write_chain(tmp, payload, originals)
            compact = json.dumps(payload, separators=(",", ":"))
            if weights is not None:
                save_file(weights, str(tmp / SAFE_WEIGHTS_NAME), metadata={"format": "pt", METADATA_KEY: compact})
                return
            for st in model_files(tmp):
                add_safetensors_metadata(st, {METADATA_KEY: compact})

        return write_atomically(directory, fill, overwrite=overwrite, kind=STEERED,
                                inputs=[getattr(model.config, "_name_or_path", None)], name=name)


#: The one weights file save_pretrained writes below its shard size (50 GB).
SAFE_WEIGHTS_NAME = "model.safetensors"
SHARD_BYTES = 50 * 10**9


def saved_state_dict(model: Any) -> dict[str, torch.Tensor] | None:
    """The tensors ``model.save_pretrained`` writes, by the names it writes them under — found with
    transformers' own steps (the keys its class never saves, tied weights kept once, its load-time
    renames reverted), so the file loads with plain ``from_pretrained``; tested against
    save_pretrained's own file. None where save_pretrained does more than that (an adapter, an
    offloaded or tensor-parallel model, shards, a transformers without these steps): it then
    writes the weights itself."""
    try:
        from transformers.core_model_loading import revert_weight_conversion
        from transformers.modeling_utils import remove_tied_weights_from_state_dict
    except ImportError:
        return None
    if getattr(model, "_hf_peft_config_loaded", False) or getattr(model, "hf_device_map", None) or \
            getattr(model, "_tp_size", None) is not None:
        return None
    state = model.state_dict()
    for key in getattr(model, "_keys_to_ignore_on_save", None) or ():
        state.pop(key, None)
    state = revert_weight_conversion(model, remove_tied_weights_from_state_dict(state, model))
    # a tensor off the CPU goes through save_pretrained's own path (it moves tensors itself)
    if any(not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.dtype not in SAFETENSORS_DTYPES
           for t in state.values()) or sum(t.numel() * t.element_size() for t in state.values()) > SHARD_BYTES:
        return None
    return {k: t.detach().contiguous() for k, t in state.items()}


def quantization_of(model: Any) -> str | None:
    """None for a plain model; "gguf" for one transformers dequantized from a GGUF (plain float
    weights, only marked by ``hf_quantizer``: saved as the float checkpoint it is). Any other
    quantization (bitsandbytes 4/8-bit, ...) is refused in one line: its stored weights are not the
    ones the edit was computed on, and no loader would apply the steering chain to them."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return None
    method = str(getattr(getattr(quantizer, "quantization_config", None), "quant_method", "")).lower()
    if "gguf" in method:
        return "gguf"
    raise bad_argument("model", f"a {method or type(quantizer).__name__}-quantized model",
                       "a model with float weights to save as a steered checkpoint",
                       "Load it unquantized (e.g. dtype=torch.bfloat16) to steer and save it, or save only the "
                       "edits with format='peft'.")


@contextlib.contextmanager
def unmarked_gguf(model: Any) -> Iterator[None]:
    """Hide the GGUF mark (``hf_quantizer``, ``config.quantization_config``) while saving."""
    quantizer, had = model.hf_quantizer, hasattr(model.config, "quantization_config")
    qconfig = getattr(model.config, "quantization_config", None)
    model.hf_quantizer = None
    if had:
        del model.config.quantization_config
    try:
        yield
    finally:
        model.hf_quantizer = quantizer
        if had:
            model.config.quantization_config = qconfig


# ---- read ----------------------------------------------------------------------------------------
_REQUIRED = [f.name for f in dataclasses.fields(SteeringRecord)
             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def read_payload(directory: str | os.PathLike) -> dict:
    """The JSON of ``steerformer/record.json`` (a :class:`CheckpointError` when it is missing or
    has no records)."""
    d = Path(directory)
    if not d.exists():
        clean_stale(d)  # a kill during an overwrite may have left this very folder aside: put it back
    path = d / SIDE_DIR / RECORD_FILE
    if not path.is_file():
        raise CheckpointError(f"{d} is not a steered checkpoint: {SIDE_DIR}/{RECORD_FILE} is missing "
                              "(it was not written by steerformer's save_steered).")
    try:
        payload = parse_json(path.read_bytes(), path)
    except ValueError as exc:  # not JSON, or nested deeper than any record
        raise CheckpointError(f"{path}: broken provenance, it is {getattr(exc, 'reason', exc)}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
        raise CheckpointError(f"{path}: broken provenance, no 'records' list")
    if not payload["records"]:
        raise CheckpointError(f"{path}: broken provenance, 'records' is empty (no edit to undo or verify)")
    return payload


def read_records(path: str | os.PathLike) -> list:
    """The steering records of a steered checkpoint folder (its chain) or of a record JSON file
    (``steer --record``); a one-line error naming ``record`` for anything else."""
    p = Path(path).expanduser()
    if p.is_dir():
        return records_of(read_payload(p), p)
    if p.is_file():
        try:
            return [SteeringRecord.from_json(p)]
        except FileFormatError:  # names the file and the field already
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise bad_argument("record", str(path), f"a steering record JSON (steer --record), not readable as one "
                               f"({type(exc).__name__})") from None
    raise bad_argument("record", str(path), "a steered checkpoint folder or a record JSON file (not found)")


def records_of(payload: dict, where: Path) -> list[SteeringRecord]:
    """The records of a chain payload, each with at least one edit (else broken provenance)."""
    out = []
    for i, r in enumerate(payload["records"]):
        if not isinstance(r, dict):
            raise CheckpointError(f"{where}: broken provenance, records[{i}] is not an object")
        missing = [k for k in _REQUIRED if k not in r]
        if missing:
            raise CheckpointError(f"{where}: broken provenance, records[{i}] is missing field {missing[0]!r}")
        try:
            rec = SteeringRecord.from_dict(r, f"{where} records[{i}]")
        except FileFormatError as exc:  # the field named by the record's schema
            raise CheckpointError(f"broken provenance: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{where}: broken provenance, records[{i}] has a bad edit ({exc})") from None
        if not rec.edits:
            raise CheckpointError(f"{where}: broken provenance, records[{i}] holds no edit")
        out.append(rec)
    return out


def named_originals(records: list[SteeringRecord]) -> dict[str, str]:
    """name -> sha256 the original must have, from the records (first edit of each weight)."""
    named: dict[str, str] = {}
    for e in (e for r in records for e in r.edits):
        named.setdefault(e.module, e.before_sha256)
        if e.changes_bias and e.bias_module:
            named.setdefault(e.bias_module, e.bias_before_sha256 or "")
    return named


def load_originals(directory: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of ``steerformer/original.safetensors`` (a :class:`CheckpointError` when missing
    or unreadable)."""
    d = Path(directory)
    path = d / SIDE_DIR / ORIGINAL_FILE
    if not path.is_file() and (d / "adapter_config.json").is_file() and not (d / "config.json").is_file():
        raise CheckpointError(f"{d} is a LoRA adapter (steerformer export --format peft), not a steered checkpoint: it "
                              "holds the edits as low-rank factors and none of the model's weights, so there is nothing "
                              f"in it to restore or verify. Load it over its base model (PeftModel.from_pretrained(base, "
                              f"'{d}')); to undo or verify the edits, run the command on the steered checkpoint it was "
                              "exported from.")
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the original weights cannot be restored (the steered checkpoint "
                              f"was damaged, or copied without its {SIDE_DIR}/ folder).")
    read_safetensors_file_header(path)  # truncation / corruption: one clear line
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors' own errors
        raise CheckpointError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None


def check_originals(records: list[SteeringRecord], originals: dict[str, torch.Tensor], where: Path) -> list[str]:
    """Problems with the originals (empty when they hold exactly the tensors the records name, each
    with the recorded hash)."""
    named = named_originals(records)
    problems = [f"{where}: original.safetensors holds {k!r}, which no record names" for k in originals if k not in named]
    problems += [f"{where}: original.safetensors lacks {k!r}, named by the records" for k in named if k not in originals]
    problems += [f"{where}: original {k!r} does not match its recorded sha256 (changed or corrupt)"
                 for k, h in named.items() if k in originals and tensor_sha256(originals[k]) != h]
    return problems


def read_chain(directory: str | os.PathLike, *, check: bool = True) -> Steering:
    """The :class:`Steering` saved in ``directory`` (records with their edits, the true originals,
    untie info). ``check``: the originals must be exactly the tensors the records name, each with
    the recorded hash (else a :class:`CheckpointError` naming the tensor)."""
    d = Path(directory)
    payload = read_payload(d)
    records = records_of(payload, d / SIDE_DIR / RECORD_FILE)
    originals = load_originals(d)
    if check:
        problems = check_originals(records, originals, d)
        if problems:
            raise CheckpointError(problems[0])
    return Steering(records=records, originals=originals, untie=payload.get("untie"))


def check_modules(model: Any, names: Any, where: Any) -> None:
    """Every weight the records name is a parameter of ``model`` (else broken provenance)."""
    for name in names:
        try:
            model.base_model.get_parameter(name)
        except AttributeError:
            raise CheckpointError(f"{where}: broken provenance, the records name module {name!r}, which "
                                  f"{type(model).__name__} does not have") from None


def attach_steering(model: Any, directory: str | os.PathLike) -> Any:
    """Re-attach the chain saved in ``directory`` to ``model`` (loaded from it): see module doc."""
    steering = read_chain(directory)
    check_modules(model, steering.originals, directory)
    try:
        replay(model, steering)
    except SteerformerError as exc:
        raise CheckpointError(f"{directory}: {exc}") from None
    return model


def is_steered_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / SIDE_DIR / RECORD_FILE).is_file()


def auto_class(path: Path) -> str:
    """The checkpoint's own head class (``config.architectures``) when transformers has it."""
    import transformers

    arch = (getattr(load_config(path), "architectures", None) or ["AutoModel"])[0]
    return arch if hasattr(transformers, arch) else "AutoModel"


def load_plain(path: Any, auto: str, dtype: torch.dtype | None = None, device: str | None = None):
    """The weights of ``path`` without the chain; any loading failure is one :class:`CheckpointError`."""
    try:
        return load_weights(path, auto_class=auto, dtype=dtype, device=device)
    except SteerformerError:
        raise
    except Exception as exc:  # transformers / safetensors errors on a corrupt checkpoint
        raise CheckpointError(f"{path}: cannot be loaded ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def load_model(model: Any, *, revision: str | None = None, dtype: torch.dtype | None = None,
               device: str | None = None, auto_class: str = "AutoModel", steering: bool = True, **kwargs):
    """Load a full transformers model (eager attention, eval mode) from anything
    :func:`~steerformer.open_source` accepts; a model object is returned as it is. A checkpoint
    saved by :func:`save_steered` comes back with its steering chain attached (``steering=False``:
    plain; a chain that does not check out is a warning here, an error in :func:`load_for_steering`)."""
    net = load_weights(model, revision=revision, dtype=dtype, device=device, auto_class=auto_class, **kwargs)
    if not steering or is_pretrained_model(model):
        return net
    path = Path(model) if isinstance(model, Path) and model.is_dir() else resolve_checkpoint(str(model), revision=revision)[0]
    if is_steered_folder(path):
        try:
            attach_steering(net, path)
        except SteerformerError as exc:  # the weights are still usable; only the undo is not
            log.warning("steering chain not attached (unsteer will not work on this model): %s", exc)
    return net


def load_for_steering(path: str | os.PathLike, *, dtype: torch.dtype | None = None, device: str | None = None):
    """Load a checkpoint with its own head class (``config.architectures``), eager attention; a
    steered checkpoint comes back with its chain attached (``unsteer`` works)."""
    resolved, _, _ = resolve_checkpoint(str(path))
    auto = auto_class(resolved)
    if is_steered_folder(resolved):
        for st in model_files(Path(resolved)):
            read_safetensors_file_header(st)  # a truncated model file: one line, before transformers reads it
        return attach_steering(load_plain(resolved, auto, dtype, device), resolved)
    return load_weights(resolved, auto_class=auto, dtype=dtype, device=device)


# ---- the checkpoint against its record -------------------------------------------------------
def _diff_fields(a: Any, b: Any, path: str = "") -> list[str]:
    """Names of the fields where two JSON values differ (records[1].gain, tensors['h.0...'] ...)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(sub)
            else:
                out += _diff_fields(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and any(isinstance(x, (dict, list)) for x in a):
        return [x for i, (p, q) in enumerate(zip(a, b)) for x in _diff_fields(p, q, f"{path}[{i}]")]
    return [] if a == b else [path or "(root)"]


def integrity_checks(d: Path, payload: dict, *, extra_files_ok: bool = False) -> list[dict]:
    """The hash checks of steered checkpoint ``d`` against its record ``payload``: the record's own
    hash and its copy in the safetensors metadata, every saved tensor (bytes, dtype, shape) and
    every other file (config, tokenizer, card). ``[{"name", "ok", "detail"}]``; ``extra_files_ok``:
    a file the record does not list is no failure (``unsteer`` does not copy it)."""
    files = model_files(d)
    if not files:
        raise CheckpointError(f"{d}: no model .safetensors file")
    hashes: dict[str, str] = {}
    metas: dict[str, str | None] = {}
    for st in files:
        hashes.update(safetensors_hashes(st))  # validates every file against its size first
        metas[st.name] = read_safetensors_metadata(st).get(METADATA_KEY)
    checks: list[dict] = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "ok": bool(ok), "detail": detail})

    # The record: its own hash, and the copy in every model file's metadata.
    rec_hash = payload.get("record_sha256")
    check("record hash", rec_hash is not None and rec_hash == payload_sha256(payload),
          "record.json matches its record_sha256" if rec_hash == payload_sha256(payload) else
          "record.json was changed after saving (record_sha256 differs)" if rec_hash else "no record_sha256 recorded")
    for fname, meta in metas.items():
        if meta is None:
            check("metadata copy", False, f"{fname}: no '{METADATA_KEY}' metadata")
            continue
        try:
            diff = _diff_fields(parse_json(meta, f"{fname} metadata"), payload)
        except ValueError:  # not JSON, or nested past any record's depth
            diff = ["(metadata is not JSON)"]
        check("metadata copy", not diff, f"{fname}: identical to record.json" if not diff else
              f"{fname}: differs from record.json in {', '.join(diff[:8])}{' ...' if len(diff) > 8 else ''}")
    # Every saved tensor.
    recorded = payload.get("tensors")
    if not isinstance(recorded, dict):
        check("tensor hashes", False, "no per-tensor sha256 recorded")
    else:
        bad = [k for k in recorded if k in hashes and hashes[k] != recorded[k]]
        for k in bad:
            check("tensor hash", False, f"{k}: saved bytes differ from the recorded sha256")
        for k in sorted(set(recorded) - set(hashes)):
            check("tensor hash", False, f"{k}: recorded but missing from the model files")
        for k in sorted(set(hashes) - set(recorded)):
            check("tensor hash", False, f"{k}: in the model files but not in the record")
        if not bad and set(recorded) == set(hashes):
            check("tensor hashes", True, f"all {len(hashes)} tensors match")
    specs = payload.get("tensor_specs")
    if isinstance(specs, dict):
        got = {}
        for st in files:
            got.update(tensor_specs(st))
        bad = sorted(k for k in set(specs) | set(got) if specs.get(k) != (list(got[k]) if k in got else None))
        for k in bad:
            check("tensor dtype/shape", False, f"{k}: header says {got.get(k)}, record says {specs.get(k)}")
    # Every other file (config, tokenizer, card).
    rec_files = payload.get("files")
    if not isinstance(rec_files, dict):
        check("file hashes", False, "no file sha256 recorded")
    else:
        now = file_hashes(d)
        bad = sorted(k for k in set(rec_files) | set(now) if rec_files.get(k) != now.get(k))
        for k in bad:
            what = _absent(d / k) if k not in now else "not in the record" if k not in rec_files else "changed"
            if what != "not in the record" or not extra_files_ok:
                check("file hash", False, f"{k}: {what}")
        if not bad:
            check("file hashes", True, f"all {len(now)} other files match")
    return checks


def _absent(path: Path) -> str:
    """Why a recorded file is not among the regular files hashed: missing, or what is there instead
    (a FIFO or a folder is named, never opened)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        try:
            target = os.stat(path).st_mode
        except OSError:
            return "a dangling symbolic link, not the regular file recorded"
        what = "a file elsewhere" if stat.S_ISREG(target) else file_kind(target)
        return f"a symbolic link to {what}, not the regular file recorded"
    return f"{file_kind(mode)}, not the regular file recorded"


# ---- undo ----------------------------------------------------------------------------------------
def check_as_saved(directory: str | os.PathLike, what: str) -> None:
    """The whole steered checkpoint checked against its record's hashes (every tensor, config and
    tokenizer file, the record itself) before ``what`` is written from it: a CheckpointError naming
    the first mismatches (a changed tensor would be published as if steerformer had written it)."""
    d = Path(directory)
    problems = [c["detail"] for c in integrity_checks(d, read_payload(d), extra_files_ok=True) if not c["ok"]]
    if problems:
        raise CheckpointError(f"{d} is not as it was saved ({'; '.join(problems[:4])}{' …' if len(problems) > 4 else ''}); "
                              f"refusing to write {what} from it. `steerformer verify {d}` shows every check.")


def unsteer_checkpoint(directory: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False,
                       last: int | None = None) -> Path:
    """From a saved steered checkpoint alone, write the original model (bit-identical weights) to
    ``out``; ``last=k`` removes only the last k steering calls (``out`` is then still steered).
    Before anything is loaded or written, the whole checkpoint is checked against the record's
    hashes (every tensor, config and tokenizer file, the record itself) and the originals (exactly
    the tensors the records name, each hash); a mismatch is a CheckpointError naming it."""
    check_last(last, len(read_chain(directory).records))  # provenance + originals, before loading anything
    check_as_saved(directory, "a restored original")
    model = load_for_steering(directory)
    unsteer(model, last=last)
    if steering_of(model) is not None:
        return save_steered(model, out, overwrite=overwrite)
    tok = load_tokenizer(model)

    def fill(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        copy_module_stack(model, tmp)  # a sentence-transformers model keeps its Pooling/Normalize stack
        if tok is not None:
            tok.save_pretrained(str(tmp))

    return write_atomically(out, fill, overwrite=overwrite, kind=UNSTEERED, inputs=[directory], name="out")


# ---- steer a checkpoint on disk ------------------------------------------------------------------
#: Other weight formats are not copied: they would hold the unedited weights next to the edited ones.
SKIPPED_WEIGHT_FILES = ("*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.onnx",
                        "*.gguf")
def lazy_method(name: str | None) -> Any:
    """The method of a lazy edit: ``name`` (the one the call's options chose), else the one method
    that can plan an edit from the stored weights alone (``Method.plan_on_disk``); refused by name
    when the chosen one cannot."""
    if name is None:
        able = [n for n in method_names() if hasattr(type(get_method(n)), "plan_on_disk")]
        if len(able) != 1:
            raise bad_argument("method", None, f"one of {', '.join(able)} for a lazy edit")
        name = able[0]
    method = get_method(name)
    if not hasattr(method, "plan_on_disk"):
        raise bad_argument("method", name, "a method that edits a checkpoint on disk (no forward pass)",
                           "Steer without --lazy.")
    return method


def steer_checkpoint(checkpoint: str | os.PathLike, out: str | os.PathLike, direction: Any = None,
                     config: SteerConfig | None = None, *, eigvec: int | None = None, token: str | None = None,
                     text: str | None = None, left: Any = None, overwrite: bool = False, card: bool = True,
                     **options: Any) -> SteeringRecord:
    """Write a steered copy of ``checkpoint`` (a local folder, the bundled MiniLM or a cached Hub
    id) to ``out`` without loading the model. ``direction``: array or ``.npy`` path, or
    ``eigvec=K`` (eigenvector of F_layer); ``left``: w (default u). Options as for ``steer``
    (a :class:`~steerformer.configs.SteerConfig` or its fields by keyword): ``gain`` (absolute) or
    ``strength`` (×|λ1(F_layer)|), ``layer``, ``solve`` ("exact", the default here); any other
    option, and ``token``/``text`` (they need a forward pass), is refused. Returns the record
    (also saved in ``out/steerformer/record.json``)."""
    cfg, own, given_config = call_options(config, None, dict(options))
    method = lazy_method(choose_method(cfg, own))
    if token is not None or text is not None:
        raise bad_argument("token" if token is not None else "text", token if token is not None else text,
                           "direction= (an array or .npy file) or eigvec= for a lazy edit (no forward pass)",
                           "Give the direction as a .npy file, or steer without --lazy.")
    source = open_source(checkpoint)
    if source.path is None or source.model is not None:
        raise bad_argument("checkpoint", str(checkpoint), "a checkpoint with *.safetensors weights for a lazy edit")
    src = Path(source.path)
    if is_steered_folder(src):
        raise bad_argument("checkpoint", str(checkpoint), "an unsteered checkpoint for a lazy edit (this one is "
                           "already steered)", "Steer it in memory (without --lazy) to extend its chain of edits.")
    # the plan, from the stored weights alone (the method's own code): one edit with its hashes unset
    plan, mcfg = method.plan_on_disk(source, cfg, own, given_config, direction=direction, eigvec=eigvec, left=left)
    edit = plan.edits[0]
    name, g, adapter = edit.module, edit.gain, source.adapter

    # apply, to the stored tensor alone
    with contextlib.closing(SafetensorsReader(src, prefix=adapter.base_model_prefix)) as reader:
        original = reader.get(name).clone()  # stored dtype and layout
        full_key = reader.full_key(name)
        shard = reader.weight_map[full_key]
    new = edit.applied_weight(original).contiguous()  # the same float64 formula as the in-memory edit
    if not bool(torch.isfinite(new).all()):
        raise bad_argument("gain", g, "a gain whose edited weight stays finite", "Use a smaller gain.")
    edit.dtype, edit.device, edit.shape = str(original.dtype).replace("torch.", ""), "cpu", list(original.shape)
    edit.before_sha256, edit.after_sha256 = tensor_sha256(original), tensor_sha256(new)

    # record (the options this edit honoured; the rest keep their defaults: refused by the plan)
    record = build_record(source, plan, None, {name: original}, {name: new}, method=method.name,
                          config={**dataclasses.replace(cfg, report=False).to_dict(), **mcfg.to_dict()})
    new_bytes = new.view(torch.uint8).numpy().tobytes() if new.numel() else b""
    del new
    shards = sorted(p.name for p in src.glob("*.safetensors"))

    def skipped(rel: Path) -> bool:
        if rel.parts[0] in (SIDE_DIR, ".cache") or rel.as_posix() in shards:
            return True
        if any(rel.match(p) for p in SKIPPED_WEIGHT_FILES):
            log.warning("%s is not copied: only safetensors weights are carried into a lazily steered checkpoint", rel)
            return True
        return bool(card and rel.as_posix() == "README.md")  # replaced by the steered model's card

    # every side file checked before the output is started: a link out of the checkpoint (HF-cache
    # links into its blobs are fine), a FIFO or a device is refused in one line, sizes are bounded
    side = side_files(src, src, checkpoint_roots(src), skip=skipped)

    def fill(tmp: Path) -> None:
        for rel, path in side:
            copy_side_file(path, tmp / rel)
        if card:
            model_card([record], model=types.SimpleNamespace(config=source.config), base_folder=src,
                       sentence_transformers=(tmp / MODULES_FILE).is_file()).save(str(tmp / "README.md"))
        # every tensor's sha256 streamed from the source (the edited one's from its new bytes);
        # dtype/shape from the source headers, which do not change
        payload = chain_payload(Steering(records=[record], originals={name: original}).to_dict(),
                                {name: edit.before_sha256}, [src / f for f in shards], tmp,
                                tensors={full_key: edit.after_sha256})
        meta = {METADATA_KEY: json.dumps(payload, separators=(",", ":"))}
        for f in shards:  # model shards: new header (+ metadata), data streamed
            rewrite_shard(src / f, tmp / f, {full_key: new_bytes} if f == shard else {}, meta)
        write_chain(tmp, payload, {name: original})

    write_atomically(out, fill, overwrite=overwrite, kind=STEERED, inputs=[src], name="out")  # never into the input
    return record
