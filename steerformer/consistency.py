"""A checkpoint checked against itself before anything is built from it, and transformers' load
judged here instead of printed.

- ``config.json`` is read through the one JSON reader (:func:`steerformer.results.parse_json`: any
  nesting depth is one error). A ``dtype`` / ``torch_dtype`` naming no torch dtype is refused, and
  the shape facts the adapter reads (width, heads, KV heads, head width, layers, vocabulary) must be
  positive integers that fit together. Each refusal names the field as config.json spells it.
- Against the weights (:func:`check_weights`): every layer's value/output tensors go through the
  adapter's own ``read_attention`` as *meta* tensors built from the safetensors headers (nothing
  is read or allocated). So a config that says more or fewer layers, another width or head count
  than the weights, a header that lies about a shape, or a checkpoint of another family, is one
  error naming the field or the tensor — for the lazy paths (analyze, ``steer --lazy``) that never
  build the model as well as for the ones that do.
- Loading (:func:`load_pretrained`) is strict: tensors that transformers would fill at random
  (missing or of another shape) are refused, and so are checkpoint tensors that belong to the
  model but have no place in it (more layers than the config says). Only what a task does not
  use stays quiet: the head of a head class loaded as its base model (``lm_head``, BERT's ``cls``),
  and a base model's pooler (steerformer reads hidden states, never ``pooler_output``).
  transformers' own load-report table is never printed.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from .errors import CheckpointError, FileFormatError, bad_argument

#: Adapter fact -> the standard transformers config field. ``config.attribute_map`` maps a family's
#: own spelling onto it (GPT-2's ``n_embd`` is ``hidden_size``); messages use the spelling in config.json.
FACT_FIELDS = {"d_model": "hidden_size", "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
               "n_layers": "num_hidden_layers", "head_dim": "head_dim", "vocab_size": "vocab_size"}
#: How messages call each fact.
FACT_WORDS = {"d_model": "the model width", "n_heads": "the attention heads", "n_kv_heads": "the key/value heads",
              "n_layers": "the layers", "head_dim": "the width of a head", "vocab_size": "the vocabulary size"}
#: Facts a config may leave out or set to null (the adapter then derives them).
OPTIONAL_FACTS = ("n_kv_heads", "head_dim", "vocab_size")
#: Modules of a base model that no steerformer computation runs (BERT-like poolers): missing from a
#: checkpoint saved from a head class, they are filled at random by transformers and never used.
UNUSED_BASE_MODULES = ("pooler",)
#: What ``dtype`` / ``torch_dtype`` in a config.json may say.
CONFIG_DTYPES = ("float32", "float16", "bfloat16", "float64", "float", "half", "double", "auto")


#: Config fields counting layers or heads, and their bound: checked on the raw config.json before
#: transformers parses it (its configs build per-layer lists: ``n_layer: 10**12`` would fill memory).
COUNT_FIELDS = ("n_layer", "num_hidden_layers", "num_layers", "n_layers", "num_decoder_layers", "n_head",
                "num_attention_heads", "num_heads", "num_key_value_heads", "n_head_kv", "num_kv_heads",
                "multi_query_group_num", "num_hidden_groups", "inner_group_num")
MAX_CONFIG_COUNT = 100_000


class MissingHeadError(CheckpointError):
    """The checkpoint lacks the head weights of the class asked for (a base model saved without its LM
    head, loaded as a causal LM): only the head is missing, the base model itself is complete.
    ``keys``: the head's missing tensors."""

    keys: tuple[str, ...] = ()


# ---- config.json ---------------------------------------------------------------------------------
def read_config_json(path: Path) -> dict:
    """The raw ``config.json`` of checkpoint folder ``path``: a JSON object, of sane depth, whose dtype
    names a torch dtype — checked before transformers parses it."""
    from .results import read_json

    f = Path(path) / "config.json"
    raw = read_json(f)
    if not isinstance(raw, dict):
        raise FileFormatError(f"{f}: a JSON {type(raw).__name__}, not an object; not a transformers config.")
    for key, v in raw.items():  # before transformers builds anything from them (layer_types lists...)
        if key in COUNT_FIELDS and type(v) is int and not 0 <= v <= MAX_CONFIG_COUNT:
            raise FileFormatError(f"{f}: {key}={v!r} is invalid: expected at most {MAX_CONFIG_COUNT} (no model has "
                                  "more layers or heads); the config is corrupt. Fix config.json.")
    for key in ("dtype", "torch_dtype"):
        v = raw.get(key)
        if v is not None and (not isinstance(v, str) or v.removeprefix("torch.") not in CONFIG_DTYPES):
            raise FileFormatError(f"{f}: {key}={v!r} is not a torch dtype (expected one of "
                                  f"{', '.join(CONFIG_DTYPES[:4])} or null). Fix config.json.")
    return raw


def _spellings(config: Any, adapter: Any, fact: str) -> list[str]:
    """The names a config.json may use for ``fact``: the family's own field, its attribute_map
    entry, the standard one."""
    std = FACT_FIELDS[fact]
    family = getattr(adapter, "family", None)
    own = getattr(family, fact, None) if family is not None else None
    names = [own if isinstance(own, str) else None, (getattr(config, "attribute_map", None) or {}).get(std), std]
    return list(dict.fromkeys(n for n in names if n))


def _spelling(config: Any, raw: dict, adapter: Any, fact: str) -> str:
    """The name config.json uses for ``fact`` (for messages)."""
    names = _spellings(config, adapter, fact)
    return next((n for n in names if n in raw), names[0])


def _is_count(v: Any) -> bool:
    return type(v) is int and v > 0


def check_config(config: Any, adapter: Any, raw: dict, where: Path) -> dict[str, int]:
    """The adapter's shape facts of ``config``, each checked (a positive integer; heads of equal
    width; KV heads dividing the heads); a CheckpointError naming the field otherwise."""
    f = Path(where) / "config.json"
    spelled = {fact: _spelling(config, raw, adapter, fact) for fact in FACT_FIELDS}
    for fact in FACT_FIELDS:
        for name in (n for n in _spellings(config, adapter, fact) if n in raw):
            if not (_is_count(raw[name]) or (raw[name] is None and fact in OPTIONAL_FACTS)):
                raise CheckpointError(f"{f}: {name}={raw[name]!r} is invalid: expected a positive integer "
                                      f"({FACT_WORDS[fact]}). Fix config.json.")
    facts: dict[str, int] = {}
    for fact in ("d_model", "n_heads", "n_layers", "n_kv_heads", "head_dim"):
        try:
            v = getattr(adapter, fact)
        except (TypeError, ValueError, ZeroDivisionError, AttributeError, IndexError) as exc:
            raise CheckpointError(f"{f}: {spelled[fact]}={getattr(config, spelled[fact], None)!r} gives no "
                                  f"{FACT_WORDS[fact]} ({type(exc).__name__}: {exc}). Fix config.json.") from None
        if not _is_count(v):
            raise CheckpointError(f"{f}: {spelled[fact]}={v!r} is invalid: expected a positive integer. Fix config.json.")
        facts[fact] = v
    d, H, G, dh = facts["d_model"], facts["n_heads"], facts["n_kv_heads"], facts["head_dim"]
    if raw.get("head_dim") is None and H * dh != d:
        raise CheckpointError(f"{f}: {spelled['n_heads']}={H} does not divide {spelled['d_model']}={d} into heads of "
                              "equal width. Fix config.json.")
    if H % G:
        raise CheckpointError(f"{f}: {spelled['n_kv_heads']}={G} does not divide {spelled['n_heads']}={H} (each "
                              "key/value head serves a whole group of query heads). Fix config.json.")
    return facts


# ---- config against the weights ------------------------------------------------------------------
class _Absent(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def check_weights(config: Any, adapter: Any, raw: dict, where: Path,
                  shape_of: Callable[[str], torch.Tensor | None], names: list[str]) -> None:
    """Every weight slot's value/output tensors read as shapes (``shape_of(key)``: a meta tensor, or
    None when the checkpoint has no such tensor; ``names``: the checkpoint's tensor names, for
    messages) must fit ``config``. One CheckpointError naming the field or the tensor otherwise."""
    facts = check_config(config, adapter, raw, where)
    f = Path(where) / "config.json"
    spelled = {fact: _spelling(config, raw, adapter, fact) for fact in FACT_FIELDS}
    shown = ", ".join(f"{spelled[k]}={facts[k]}" for k in ("d_model", "n_heads", "n_kv_heads", "head_dim")
                      if spelled[k] in raw or k in ("d_model", "n_heads"))
    seq = adapter.layer_sequence()
    first_layer = {slot: seq.index(slot) for slot in sorted(set(seq))}
    for slot, layer in first_layer.items():
        asked: list[tuple[str, torch.Tensor | None]] = []

        def get(key: str) -> torch.Tensor:
            t = shape_of(key)
            asked.append((key, t))
            if t is None:
                raise _Absent(key)
            return t

        try:
            w = adapter.read_attention(layer, get, parts=("vo",))
            problem = _shape_problem(w, facts)
        except _Absent as exc:
            present = [k for k, t in asked if t is not None]
            if present:
                raise CheckpointError(f"{where}: tensor {exc.key!r} is missing from the checkpoint (layer {layer} has "
                                      f"{', '.join(present)}); transformers would fill it at random. Re-download or "
                                      "re-save the checkpoint.") from None
            if slot == 0:
                some = ", ".join(names[:3]) + (" …" if len(names) > 3 else "")
                raise CheckpointError(f"{f}: model_type={adapter.model_type!r}, but the checkpoint has no {exc.key!r} "
                                      f"(its tensors: {some}); is model_type right for these weights?") from None
            raise CheckpointError(f"{f}: {spelled['n_layers']}={adapter.n_layers} but the checkpoint holds the "
                                  f"attention weights of {slot} layers ({exc.key!r} is missing). Fix config.json.") from None
        except (RuntimeError, ValueError, IndexError) as exc:  # a reshape the shapes do not allow
            problem = f"they cannot be split that way ({str(exc).splitlines()[0][:120]})"
        if problem:
            tensors = ", ".join(f"{k} {list(t.shape)}" for k, t in asked if t is not None)
            raise CheckpointError(f"{where}: config.json ({shown}) does not fit the weights of layer {layer}: "
                                  f"{tensors}: {problem}. Fix config.json or re-save the checkpoint.")
    extra = _next_layer_key(adapter)
    if extra is not None and shape_of(extra) is not None:
        raise CheckpointError(f"{f}: {spelled['n_layers']}={adapter.n_layers} but the checkpoint holds more layers "
                              f"({extra!r} too); they would be ignored. Fix config.json.")


def _shape_problem(w: Any, facts: dict[str, int]) -> str | None:
    """What is wrong with canonical weights ``w`` (W_V (H_kv, d_h, d), W_O (H, d, d_h)), or None."""
    d, H, G, dh = facts["d_model"], facts["n_heads"], facts["n_kv_heads"], facts["head_dim"]
    (g, vh, vd), (h, od, oh) = w.W_V.shape, w.W_O.shape
    if vd != d or od != d:
        return f"they read a model width of {vd if vd != d else od}, not {d}"
    if (g, h) != (G, H):
        return f"they hold {h} query / {g} key-value heads, not {H} / {G}"
    if vh != dh or oh != dh:
        return f"their heads are {vh if vh != dh else oh} wide, not {dh}"
    return None


def _next_layer_key(adapter: Any) -> str | None:
    """The output-weight key a layer after the config's last would have (None when the key names no
    single layer index, e.g. ALBERT's shared groups)."""
    if adapter.shares_weights or not adapter.slots():
        return None
    n = len(adapter.slots())
    parts = adapter.output_weight_name(n - 1).split(".")
    at = [i for i, p in enumerate(parts) if p == str(n - 1)]
    if len(at) != 1:
        return None
    parts[at[0]] = str(n)
    return ".".join(parts)


# ---- strict loading ------------------------------------------------------------------------------
class _NoLoadReport(logging.Filter):
    """Drops transformers' load-report table: steerformer judges the loading info itself
    (:func:`judge_loading`) and says what matters in one line. (A filter, not a raised level:
    transformers checks that logger's level for other purposes.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in record.getMessage()


@contextlib.contextmanager
def _without_load_report() -> Iterator[None]:
    logger = logging.getLogger("transformers.modeling_utils")
    quiet = _NoLoadReport()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def load_pretrained(cls: Any, path: Path, **kw: Any) -> Any:
    """``cls.from_pretrained(path, **kw)``, strict (see the module doc): a tensor transformers would
    fill at random, or a checkpoint tensor of the base model that finds no place, is one
    CheckpointError (:class:`MissingHeadError` when only a head class's head is missing)."""
    if kw.pop("trust_remote_code", False):
        raise bad_argument("trust_remote_code", True, "False: steerformer never runs a checkpoint's own code",
                           "Drop trust_remote_code.")
    with _without_load_report():
        net, info = cls.from_pretrained(str(path), output_loading_info=True, ignore_mismatched_sizes=True,
                                        trust_remote_code=False, **kw)  # never the checkpoint's own code
    judge_loading(net, info, path)
    return net


def _in_base(net: Any, key: str) -> tuple[bool, str]:
    """(whether ``key`` belongs to the base model, the key relative to the base model)."""
    base = net.base_model
    if base is net:
        return key.split(".")[0] in dict(net.named_children()), key
    prefix = f"{net.base_model_prefix}."
    return key.startswith(prefix), key.removeprefix(prefix)


def judge_loading(net: Any, info: dict, path: Path) -> None:
    """Refuse what ``from_pretrained``'s loading ``info`` says was filled at random or left out."""
    name = type(net).__name__
    for key, ckpt_shape, model_shape in sorted(info.get("mismatched_keys") or [], key=lambda x: x[0]):
        raise CheckpointError(f"{path}: tensor {key!r} is {list(ckpt_shape)} in the checkpoint but {name} built from "
                              f"config.json has {list(model_shape)}; transformers would fill it at random. Fix "
                              "config.json or re-save the checkpoint.")
    placed = [(key, *_in_base(net, key)) for key in sorted(info.get("missing_keys") or [])]
    head = [key for key, inside, _ in placed if not inside]
    missing = [key for key, inside, rel in placed if inside and rel.split(".")[0] not in UNUSED_BASE_MODULES]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise CheckpointError(f"{path}: tensor {missing[0]!r}{more} missing from the checkpoint, which {name} "
                              "(from config.json) needs; transformers would fill it at random. Is config.json "
                              "right for these weights? Re-download or re-save the checkpoint.")
    if head:
        err = MissingHeadError(f"{path}: the checkpoint has no weights for {name}'s head ({', '.join(head[:3])}); "
                               "transformers would fill them at random. It is a base model: load it as one "
                               "(AutoModel), or set config.json's architectures to the base class.")
        err.keys = tuple(head)
        raise err
    stray = sorted(k for k in info.get("unexpected_keys") or [] if _in_base(net, k)[0])
    if stray:
        more = f" and {len(stray) - 1} more" if len(stray) > 1 else ""
        raise CheckpointError(f"{path}: tensor {stray[0]!r}{more} in the checkpoint has no place in {name} built from "
                              "config.json (more layers or other modules than the config says); they would be "
                              "ignored. Fix config.json.")


__all__ = ["CONFIG_DTYPES", "FACT_FIELDS", "MissingHeadError", "UNUSED_BASE_MODULES", "check_config", "check_finite", "check_weights",
           "judge_loading", "load_pretrained", "read_config_json"]


def check_finite(t: torch.Tensor, key: str, where: str) -> None:
    """Refuse a tensor read from a checkpoint or a model that holds NaN or inf (one CheckpointError
    naming the tensor, where it came from and how many entries are bad)."""
    if not t.is_floating_point() or t.numel() == 0:
        return
    # min and max are NaN when any entry is (both propagate NaN) and ±inf when any entry is: the
    # same answer as isfinite(t).all(), exactly, without its boolean tensor — several times faster
    # on CPU for bf16/fp16 weights (benchmarks/bench_families.py). The count only on failure.
    lo, hi = torch.aminmax(t)
    if not (bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))):
        bad = int((~torch.isfinite(t)).sum())
        raise CheckpointError(f"tensor {key!r} ({where}) has {bad} non-finite values (NaN/inf): the checkpoint "
                              "is corrupt or was saved after a diverged update.")
