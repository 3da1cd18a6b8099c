"""One home for exports: each output format of a steered checkpoint is a unit registered by name
(:class:`ExportFormat`: its help, the export options it takes, its writer), and
``steerformer export DIR --format NAME`` offers exactly the registered names (:func:`format_names`;
the built-in ones, each with its help, are registered at the end of this module).

A writer is a small function ``writer(steered, out, *, overwrite, say, **options) -> (path, line)``
(``steered``: the steered folder, or for a control vector also the record JSON; ``say``: progress
lines; ``line``: what the CLI prints). :meth:`ExportFormat.write` is the one place every export
passes through: the options a format does not take are refused there, by name, before anything
loads. Import-light (no torch): the CLI reads the names to build ``--format``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from ..errors import SteerformerError, bad_argument
from ..outputs import writer_lock
from ..results import read_json


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One output format: ``name``, ``help`` (what the output is), ``writer`` (the function that
    writes it), ``options`` (the export options it takes), ``target`` ("folder" or "file")."""

    name: str
    help: str
    writer: Callable[..., tuple[Path, str]]
    options: tuple[str, ...] = ()
    target: str = "folder"

    def write(self, steered: str | Path, out: str | Path, *, overwrite: bool = False,
              say: Callable[[str], None] | None = None, **options: Any) -> tuple[Path, str]:
        """Write ``steered`` as this format to ``out``: (the path written, the line the CLI prints).
        An option this format does not take (given, not None) is refused by name first."""
        for key, value in options.items():
            if value is not None and key not in self.options:
                takes = [f.name for f in _FORMATS.values() if key in f.options]
                raise bad_argument(key, value, f"{key} only with format {' or '.join(map(repr, takes))}",
                                   f"Leave it out for format {self.name!r}.")
        given = {k: v for k, v in options.items() if k in self.options}
        from .checkpoint import check_as_saved

        inputs = [Path(steered)] + [Path(v) for k, v in given.items() if k == "source" and isinstance(v, (str, Path))]
        target = Path(out).expanduser().resolve()
        for src in inputs:  # never into (or over, or around) what it reads: it would publish a mix, or corrupt it
            src = src.expanduser().resolve()
            if target == src or src in target.parents or target in src.parents:
                raise bad_argument("out", str(out), f"a path outside the export's input {src}",
                                   "Write the export beside the steered checkpoint, not inside it.")
        # the output's writer lock around the whole export (its writer takes it again, as its own): a second
        # writer, or a lock file that is a link or a folder, is refused before the checkpoint is read
        with writer_lock(target, "out", str(out), wait=overwrite):
            if not Path(steered).is_file():  # a record JSON (control-vector) holds no weights to verify
                check_as_saved(steered, f"a {self.name} export")  # as unsteer does: publish only what we wrote
            return self.writer(Path(steered), Path(out), overwrite=overwrite, say=say or (lambda line: None), **given)


_FORMATS: dict[str, ExportFormat] = {}


def register_format(name: str, writer: Callable[..., tuple[Path, str]], help: str, *, options: tuple[str, ...] = (),
                    target: str = "folder", replace: bool = False) -> ExportFormat:
    """Register an output format under ``name`` (``steerformer export --format NAME``); a taken name
    is refused unless ``replace=True``."""
    if name in _FORMATS and not replace:
        raise bad_argument("name", name, "a format name not taken", "Pick another name, or pass replace=True.")
    fmt = ExportFormat(name, help, writer, tuple(options), target)
    _FORMATS[name] = fmt
    return fmt


def format_names() -> list[str]:
    """The registered format names, in registration order."""
    return list(_FORMATS)


def get_format(name: str) -> ExportFormat:
    """The registered format ``name``."""
    if name not in _FORMATS:
        raise bad_argument("format", name, f"one of {', '.join(_FORMATS)}")
    return _FORMATS[name]


def export_steered(steered: str | Path, out: str | Path, format: str, *, overwrite: bool = False,
                   **options: Any) -> Path:
    """Write the steered checkpoint ``steered`` as ``format`` (a registered name) to ``out``."""
    return get_format(format).write(steered, out, overwrite=overwrite, **options)[0]


# ---- the built-in formats: one small writer each -------------------------------------------------
def write_checkpoint(steered: Path, out: Path, *, overwrite: bool, say: Callable[[str], None]) -> tuple[Path, str]:
    from .checkpoint import load_for_steering, read_chain, save_steered

    read_chain(steered)  # not a steered checkpoint: one line, before any weight loads
    say(f"loading {steered}")
    path = save_steered(load_for_steering(steered), out, overwrite=overwrite, name="out")
    return path, f"saved to {path}"


def write_peft(steered: Path, out: Path, *, overwrite: bool, say: Callable[[str], None],
               lora_rank: int | None = None) -> tuple[Path, str]:
    from .checkpoint import load_for_steering, read_chain, save_steered
    from .common import RECORD_FILE, SIDE_DIR

    if lora_rank is not None and (isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1):
        raise bad_argument("lora_rank", lora_rank, "a whole number >= 1")
    read_chain(steered)  # not a steered checkpoint: one line, before any weight loads
    say(f"loading {steered}")
    model = load_for_steering(steered)
    say(f"writing {out} (the edits as a LoRA adapter)")
    path = save_steered(model, out, overwrite=overwrite, format="peft", lora_rank=lora_rank, name="out")
    lora = read_json(path / SIDE_DIR / RECORD_FILE).get("lora", {})
    worst = max((v["relative_error"] for v in lora.values()), default=0.0)
    return path, (f"LoRA: {len(lora)} module(s), rank {'/'.join(sorted({str(v['rank']) for v in lora.values()}))}"
                  + (f", truncation error up to {worst:.3g}" if worst > 0 else ", exact")
                  + f"\nsaved to {path} (PeftModel.from_pretrained(base, {str(path)!r}))")


def write_gguf(steered: Path, out: Path, *, overwrite: bool, say: Callable[[str], None], source: Any = None,
               dtype: str | None = None) -> tuple[Path, str]:
    from ..formats import check_target_file, write_gguf_model
    from ..loading import gguf_file_of
    from .checkpoint import load_for_steering, read_chain

    records = read_chain(steered).records  # not a steered checkpoint: one line, before any weight loads
    if source is None:  # the GGUF the steered model was loaded from (a .gguf path, the bundled SmolLM2)
        try:
            source = gguf_file_of(records[0].model_id)
        except SteerformerError:  # the bundled SmolLM2's file is not installed: ask for the source
            source = None
    if source is None:
        raise bad_argument("source", None, "the GGUF the model came from (its tokenizer metadata comes only from "
                           "llama.cpp's converter)", "Pass --source MODEL.gguf.")
    check_target_file(out, overwrite, name="out", inputs=[steered, source])
    say(f"loading {steered}")
    model = load_for_steering(steered)
    dtype = dtype or "f16"
    say(f"writing {out} ({dtype}, metadata from {source})")
    path = write_gguf_model(model, out, source=source, dtype=dtype, overwrite=overwrite, name="out")
    return path, f"saved to {path} (llama-cli -m {path.name}; ollama create NAME with FROM ./{path.name})"


def write_control_vector(steered: Path, out: Path, *, overwrite: bool, say: Callable[[str], None],
                         model_hint: str | None = None) -> tuple[Path, str]:
    from .checkpoint import read_records
    from .direction import Direction

    cv = Direction.from_record(read_records(steered)).to_control_vector(model_hint)
    path = cv.save(out, overwrite=overwrite, name="out")
    return path, (f"saved to {path}: {cv.notes['scale']}\n"
                  f"llama-cli -m MODEL.gguf --control-vector-scaled {path.name} 1.0")


register_format("checkpoint", write_checkpoint, "the whole steered model, its chain of edits kept (a "
                "sentence-transformers model keeps its module stack)")
register_format("peft", write_peft, "the edits alone, as a PEFT LoRA adapter folder", options=("lora_rank",))
register_format("gguf", write_gguf, "the whole steered model as one GGUF file for llama.cpp / Ollama",
                options=("source", "dtype"), target="file")
register_format("control-vector", write_control_vector, "the vectors the steer added, as a llama.cpp control "
                "vector .gguf (strength 1.0 = that steer)", options=("model_hint",), target="file")
