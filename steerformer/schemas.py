"""The schemas of the files steerformer reads back (pydantic v2): one per file, so that a value of the
wrong type, size or range anywhere is one :class:`~steerformer.errors.FileFormatError` line naming
the file and the field — never a ``KeyError``/``TypeError`` from deep inside the reader.

Public API:

    checked(data, schema, where) -> schema instance   ``data`` (parsed JSON or metadata) validated
    dataclass_schema(cls, overrides={}) -> schema     a schema from a dataclass's annotations (a record
                                                      type is its own schema: one declaration)
    Strict                                            the base of every schema: strict types, strings of
                                                      at most MAX_TEXT_CHARS, unknown keys allowed
    DirectionFile, DirectionMetadata                  direction.json (steering/direction.py)
    ControlVectorMetadata                             a control-vector GGUF's key-value metadata
    CollapseRun                                       a collapse run folder's run.json
    EditFile                                          one edit of a steering record
    Sha256, LayerIndex, ModelHint                     the shared field types

pydantic is imported here and nowhere else on the reading side; this module is imported only by the
readers, so ``steerformer --help`` never imports it.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Annotated, Any, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model

from .errors import FileFormatError

#: No text field of any file steerformer writes is longer (a prompt, a message, a model id).
MAX_TEXT_CHARS = 100_000
#: No model has more layers (the CLI's bound on --layers too).
MAX_LAYER = 100_000
#: How many characters of a wrong value a message quotes.
SHOWN_CHARS = 60


class Strict(BaseModel):
    """Strict types (no "3" for 3, no true for 1), every string bounded, unknown keys kept (a newer
    steerformer may add fields)."""

    model_config = ConfigDict(strict=True, extra="allow", str_max_length=MAX_TEXT_CHARS, allow_inf_nan=True)


def _printable(v: str) -> str:
    if not v.isprintable():
        raise ValueError("printable text (no control characters)")
    return v


Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
LayerIndex = Annotated[int, Field(ge=0, le=MAX_LAYER)]
#: A model's name as a control vector carries it (llama.cpp's controlvector.model_hint): short, printable.
ModelHint = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,64}$")]  # formats.check_model_hint's rule
ShortName = Annotated[str, StringConstraints(max_length=4096), AfterValidator(_printable)]


class DirectionMetadata(Strict):
    """``metadata`` of direction.json: free keys, and the two steerformer reads typed."""

    model_hint: Optional[ModelHint] = None
    scale: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None


class DirectionFile(Strict):
    """direction.json (``Direction.save``): everything but the vectors, and their sha256 by tensor name."""

    format: Optional[ShortName] = None
    model_id: Optional[ShortName] = None
    revision: Optional[ShortName] = None
    method: Optional[ShortName] = None
    layers: Optional[list[LayerIndex]] = Field(default=None, max_length=MAX_LAYER)
    d_model: Optional[Annotated[int, Field(ge=1, le=1 << 24)]] = None
    k: Optional[dict[Annotated[str, StringConstraints(pattern=r"^[0-9]{1,6}$")], Annotated[int, Field(ge=1)]]] = None
    # the caller's own record of the prompts (a sha256 by role, as Direction's callers write it): short text
    prompts_sha256: Optional[dict[Annotated[str, StringConstraints(max_length=64)],
                                  Annotated[str, StringConstraints(max_length=128)]]] = None
    sha256: Optional[dict[Annotated[str, StringConstraints(pattern=r"^layer\.[0-9]{1,6}$")], Sha256]] = None
    metadata: Optional[DirectionMetadata] = None
    steerformer_version: Optional[ShortName] = None


class ControlVectorMetadata(Strict):
    """The key-value metadata of a control-vector GGUF that steerformer reads."""

    layer_count: Optional[Annotated[int, Field(ge=1, le=MAX_LAYER)]] = Field(None, alias="controlvector.layer_count")
    model_hint: Optional[ModelHint] = Field(None, alias="controlvector.model_hint")
    notes: dict[str, str] = Field(default_factory=dict, alias="steerformer.note")


class CollapseRun(Strict):
    """run.json of a collapse run folder: the options and meta it was started with, and the hashes of
    what it stored (``integrity``, checked piece by piece by the store)."""

    options: dict[str, Any]
    meta: dict[str, Any]
    integrity: Optional["CollapseIntegrity"] = None


class CollapseIntegrity(Strict):
    format: int
    prompts: Optional[Sha256] = None
    embedding: Optional[Sha256] = None
    passes: list[Optional[Sha256]] = Field(default_factory=list, max_length=1_000_000)
    states: list[Optional[Sha256]] = Field(default_factory=list, max_length=1_000_000)


CollapseRun.model_rebuild()

Vector = Union[list[float], list[list[float]]]


class EditFile(Strict):
    """One edit of a steering record (``Edit.to_dict``)."""

    module: ShortName
    layer: Annotated[int, Field(ge=-1, le=MAX_LAYER)]
    slot: Annotated[int, Field(ge=-1, le=MAX_LAYER)]
    u: Vector
    a: Vector
    gain: float
    kind: ShortName = "steer"
    solve: Optional[dict[str, Any]] = None
    w: Optional[Vector] = None
    w_eff: Optional[Vector] = None
    bias_coef: Optional[float] = None
    bias_module: Optional[ShortName] = None
    compensate_bias: bool = False
    transposed: bool = False
    dtype: str = ""
    device: str = ""
    shape: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, max_length=8)
    before_sha256: str = ""
    after_sha256: str = ""
    bias_before_sha256: Optional[str] = None
    bias_after_sha256: Optional[str] = None
    writer: ShortName = "attention"
    index: Optional[Annotated[int, Field(ge=0)]] = None
    row_scale: Optional[Vector] = None
    col_scale: Optional[Vector] = None
    bias_delta: Optional[Vector] = None


def dataclass_schema(cls: type, overrides: dict[str, Any] | None = None) -> type[Strict]:
    """A :class:`Strict` schema with one field per field of the dataclass ``cls``, typed by its
    annotation or null (``overrides``: a field's type replaced, e.g. a nested dataclass by its schema),
    required where the dataclass has no default; private fields (``_x``) are left out."""
    return _dataclass_schema(cls, tuple(sorted((overrides or {}).items(), key=lambda kv: kv[0])))


@functools.lru_cache(maxsize=None)
def _dataclass_schema(cls: type, overrides: tuple) -> type[Strict]:
    hints, fields = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        # Optional: a method that does not measure a quantity stores null for it (the addition's strength),
        # whatever the annotation says; the type of every value that is there is still checked
        kind = Optional[dict(overrides).get(f.name, hints[f.name])]
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        fields[f.name] = (kind, None if has_default else ...)
    return create_model(f"{cls.__name__}File", __base__=Strict, **fields)


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'} of {len(value)}"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def checked(data: Any, schema: type[BaseModel], where: Any) -> BaseModel:
    """``data`` as ``schema``, or one :class:`FileFormatError` line: ``WHERE: field F: what is wrong
    (got V). Replace the file.`` (the first wrong field; ``where``: the file, as the user knows it)."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in first["loc"]) or "the top level"
        msg = first["msg"].replace("Value error, ", "")
        reason = f"field {field}: {msg} (got {_shown(first.get('input'))})"
        err = FileFormatError(f"{where}: {reason}. Replace the file (or write it again with steerformer).")
        err.reason = reason
        raise err from None
