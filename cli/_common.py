"""Shared CLI helpers: turn library errors into one clean line and exit code 2."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import re
import typing
from enum import Enum
from pathlib import Path
from typing import Iterator

import typer

from steerformer.configs import check_device, select_layers
from steerformer.errors import SteerformerError, bad_argument
from steerformer.outputs import KINDS, RECORD, check_output_file, check_output_folder, command_inputs, safe_folder_name
from steerformer.results import read_json

try:  # typer >= 0.2x vendors click; older typer runs on click itself
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import get_current_context


#: The parameters that name what a command writes, never one of its inputs (``report FOLDER``: the
#: page goes into the folder it renders, by design).
WRITTEN_PARAMS = ("out", "record_json", "folder")


def command_input_paths() -> list:
    """What the running command reads, from its own parameters: every positional argument (MODEL,
    DIRECTION, a steered folder...) and every option whose value is a path (``--direction``,
    ``--positive``, ``--source``...), except what it writes (:data:`WRITTEN_PARAMS`)."""
    ctx = get_current_context(silent=True)
    if ctx is None:
        return []
    kinds = {p.name: getattr(p, "param_type_name", "") for p in ctx.command.params}
    found = []
    for name, value in ctx.params.items():
        if name in WRITTEN_PARAMS or value is None:
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, os.PathLike) or (kinds.get(name) == "argument" and isinstance(v, str)):
                found.append(v)
    return found


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a steerformer error as one line on stderr (no traceback) and exit with status 2. Inside,
    every output check keeps apart from the command's inputs (:func:`command_input_paths`,
    ``steerformer.outputs.command_inputs``): no output is ever written inside something it reads."""
    try:
        with command_inputs(command_input_paths()):
            yield
    except SteerformerError as exc:
        typer.echo(f"error: {cli_message(exc)}", err=True)
        raise typer.Exit(code=2) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(code=130) from None


#: The help of every model argument: what it takes, with the two bundled aliases (offline).
MODEL_HELP = ("Checkpoint folder, .gguf file, Hub id, or a bundled model: 'minilm' (all-MiniLM-L6-v2) "
              "or 'smollm2' (SmolLM2-135M-Instruct).")

#: No model has this many layers; a longer --layers range is a typo (and would fill memory).
MAX_LAYERS = 100_000


# Library argument name -> CLI flag, where the command's own parameter has another name.
# Names that match a parameter of the running command (``direction`` -> ``--direction``) need no entry.
FLAG_OF_ARGUMENT: dict[str, str] = {
    "early_stop_tol": "--early-stop",
    "texts": "--text",
}


#: The same for one command only: ``save_steered(directory=...)`` is what ``steer --out`` names.
FLAG_OF_ARGUMENT_IN: dict[str, dict[str, str]] = {
    "steer": {"directory": "--out", "layers": "--layers"},
    "make": {"directory": "--out"},  # direction make: Direction.save(directory)
    "evaluate": {"coeff": "--coeffs"},  # each value of --coeffs is an activation_steering coeff
}


def flag_of(argument: str) -> str | None:
    """The flag the running command uses for a library argument name; ``None`` outside a command,
    for a positional argument (its message keeps the name) or when the command has no such option."""
    ctx = get_current_context(silent=True)
    own = FLAG_OF_ARGUMENT_IN.get(ctx.command.name, {}) if ctx is not None else {}
    name = own.get(argument) or FLAG_OF_ARGUMENT.get(argument, argument)
    if name.startswith("-"):
        return name
    p = next((p for p in ctx.command.params if p.name == name), None) if ctx is not None else None
    if p is None or getattr(p, "param_type_name", "") != "option":
        return None
    long = [o for o in p.opts if o.startswith("--")]
    return (long or list(p.opts))[0]


def cli_message(exc: BaseException) -> str:
    """The error's message with the library's argument names replaced by the command's flags.

    Library errors name Python arguments (``direction='x.npy' is invalid``); on the command line
    the same error names the flag (``--direction='x.npy' is invalid``). Only names are renamed:
    the offending argument where the message names it (``bad_argument``'s ``name=value`` or its
    whole label such as ``direction (d.npy)``), and another argument written as a bare ``name=``
    in a fix (``give gain= or strength=``). Prose ("nats per token (e.g. 0.3)") and code
    ("np.asarray(v, dtype=float)") keep their words: a name followed by a value or by `` (`` is
    not renamed unless it is the offending argument's own label. A value ``None`` (the flag was
    not given) reads "--flag is missing".
    """
    msg = str(exc)
    arg = getattr(exc, "argument", None)
    if arg is None:
        return msg
    ctx = get_current_context(silent=True)
    if ctx is None:
        return msg
    head = re.match(r"[A-Za-z_]\w*", arg)
    own = display_name(head.group(0)) if head is not None and not arg.startswith("-") else None
    if own is not None:  # the offending argument: its name at the start, a longer label anywhere
        label = own + arg[head.end():]
        if label == own:  # a plain name: at the start, and as "name=" anywhere ("Use n_prompts=5 or fewer")
            msg = re.sub(rf"^{re.escape(arg)}(?=[=\s(])", lambda _: label, msg)
            msg = re.sub(rf"(?<![\w.-]){re.escape(arg)}=", lambda _: label + "=", msg)
            # a flag of one number shows the number, not the library's list ("--layer=[99]")
            msg = re.sub(rf"^{re.escape(label)}=\[(-?\d+)\] is invalid", rf"{label}=\1 is invalid", msg) \
                if _takes_one_int(head.group(0)) else msg
        else:  # a label such as "direction (d.npy)" is the argument wherever it appears
            msg = re.sub(rf"(?<![\w.-]){re.escape(arg)}(?![\w])", lambda _: label, msg)
    # a value None is a flag not given
    msg = re.sub(r"^(\S+(?: \([^)]*\))?)=None is invalid: expected", r"\1 is missing: expected", msg)
    names = set(FLAG_OF_ARGUMENT) | {p.name for p in ctx.command.params if p.name}
    names |= set(FLAG_OF_ARGUMENT_IN.get(ctx.command.name, {}))
    for name in sorted(names, key=len, reverse=True):
        flag = flag_of(name)
        if flag is not None:  # "give gain= or strength=": a bare "name=" (no value after it) in prose
            msg = re.sub(rf"(?<![\w.-]){re.escape(name)}=(?=[\s,;:.)]|$)", lambda _: flag + "=", msg)
            # "up to passes (20)": a name with its value in parentheses (not "per token (e.g. 0.3)")
            msg = re.sub(rf"(?<![\w.-]){re.escape(name)}(?= \((?:-?[\d.e+]+|'[^']*')\))", lambda _: flag, msg)
    return msg


def _takes_one_int(argument: str) -> bool:
    """The running command's option for ``argument`` takes one integer (``--layer``)."""
    ctx = get_current_context(silent=True)
    own = dict(FLAG_OF_ARGUMENT_IN.get(ctx.command.name, {})) if ctx is not None else {}
    name = own.get(argument, argument)
    for p in ctx.command.params if ctx is not None else ():
        if p.name == name:  # click's ParamType (.type) or newer typer's own parameter (display_type)
            kind = getattr(getattr(p, "type", None), "name", None)
            if kind is None and callable(getattr(p, "display_type", None)):
                kind = {"<int>": "integer"}.get(str(p.display_type(None)).strip())
            return kind == "integer"
    return False


def display_name(argument: str) -> str | None:
    """How the running command names a library argument: its flag (``--layer``) or, for the
    command's positional argument, its name on the usage line (``MODEL``); ``None`` if it has none."""
    flag = flag_of(argument)
    if flag is not None:
        return flag
    ctx = get_current_context(silent=True)
    if ctx is None:
        return None
    name = {"model_or_path": "model"}.get(argument, argument)
    for p in ctx.command.params:
        if p.name == name and getattr(p, "param_type_name", "") == "argument":
            return (p.metavar or name).upper()
    return None


def parse_layers(spec: str | None, name: str = "--layers") -> list[int] | None:
    """Parse ``--layers`` as ``"0,3,5"``, ``"2-5"`` (inclusive), ``"-1"`` or a mix; ``None`` (the flag
    not given) = all. An empty list (``--layers ''``) is refused: leave the flag out for all layers."""
    if spec is None:
        return None
    if spec.strip() == "":
        raise bad_argument(name, spec, "at least one layer, e.g. '0,2,5-7' or '-1'", f"Leave {name} out for all layers.")
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(-?\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise bad_argument(
                name, spec, "comma-separated layer indices or inclusive ranges such as '0,2,5-7'"
            )
        lo = int(m.group(1))
        if m.group(2) is not None:
            hi = int(m.group(2))
            if lo < 0 or hi < lo or hi - lo >= MAX_LAYERS:
                raise bad_argument(name, spec, f"ranges 'a-b' with 0 <= a <= b < a + {MAX_LAYERS} "
                                   f"('{part.strip()}' is {'empty' if hi < lo and lo >= 0 else 'not one'})",
                                   "Write negative indices singly, e.g. '-2,-1'.")
            out.extend(range(lo, hi + 1))
        else:
            out.append(lo)
    return out


def check_cheap_options(*, out=None, record=None, kind: str | None = None, overwrite: bool = False,
                        inputs=(), device: str | None = None, incremental: bool = False) -> None:
    """Everything that can be refused without loading a model, refused before loading it: the
    output folder and the --record file (steerformer.outputs rules; ``inputs``: the checkpoint and
    the files the command reads), the input files (each must be a file), the --device."""
    if out is not None and kind is not None:
        check_output_folder(out, KINDS[kind], overwrite=overwrite, inputs=inputs, name="--out",
                            incremental=incremental)
    if record is not None:
        check_output_file(record, RECORD, overwrite=overwrite, inputs=inputs, outputs=[out], name="--record")
    if device is not None:
        check_device(device, name="--device")


def check_input_files(**files) -> None:
    """Each given ``flag_name=path`` (``--positive`` as ``positive``) names an existing file."""
    for name, path in files.items():
        if path is not None and not Path(path).expanduser().is_file():
            flag = "--" + name.replace("_", "-")
            what = "a folder" if Path(path).expanduser().is_dir() else "not found"
            raise bad_argument(flag, str(path), f"an existing file ({what})", "Check the path.")


def config_options(cls, *more: type, into: str = "options", names: tuple[str, ...] | None = None):
    """Decorator: one typer option per command-line field of the dataclass config ``cls``
    (:mod:`steerformer.configs`), built from the field's metadata (flag, help, type, choices) —
    the single declaration of each option. The options take the place of the command's parameter
    ``into``, which receives ``{field: value}`` (inverted flags negated, choices as strings) to build
    the config inside ``user_errors()``. ``more``: further config classes whose fields join the same
    ``into`` (``steer``: every built-in method's options). ``names``: only these fields."""
    def deco(f):
        sig = inspect.signature(f)
        hints = typing.get_type_hints(f)
        conv: dict[str, tuple[str, typing.Callable]] = {}
        generated = []
        for owner, fl in ((c, fl) for c in (cls, *more) for fl in dataclasses.fields(c)):
            md = fl.metadata
            if not md.get("cli", False) or (names is not None and fl.name not in names):
                continue
            if md["invert"]:
                pname, default, ann, decls = md["invert"].lstrip("-").replace("-", "_"), False, bool, [md["invert"]]
                conv[pname] = (fl.name, lambda v: not v)
            else:
                pname, default = fl.name, fl.default
                ann = md["cli_type"] or type(default)
                decls = [md["flag"] or "--" + fl.name.replace("_", "-")]
                if md["choices"]:
                    ann = Enum(f"{owner.__name__}_{fl.name}", {c.replace("-", "_"): c for c in md["choices"]}, type=str)
                    default = None if default is None else ann(default)
                    conv[pname] = (fl.name, lambda v: None if v is None else getattr(v, "value", v))
                else:
                    conv[pname] = (fl.name, lambda v: v)
                if default is None:
                    ann = typing.Optional[ann]
            if md["short"]:
                decls.append(md["short"])
            generated.append(inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                               default=typer.Option(default, *decls, help=md["help"]), annotation=ann))
        params = []
        for p in sig.parameters.values():
            if p.name == into:
                params.extend(generated)
            else:
                params.append(p.replace(annotation=hints.get(p.name, p.annotation)))

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            kwargs[into] = {name: fn(kwargs.pop(p)) for p, (name, fn) in conv.items() if p in kwargs}
            return f(*args, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return deco


def default_out(command: str, model: str):
    """The default ``--out`` of every command: ``runs/<command>/<model>``, the model's name as one
    safe path component (a local folder by its own name, a Hub id by its last part)."""
    local = Path(model).expanduser()
    return Path("runs") / command / safe_folder_name(local.resolve().name if local.is_dir() else model)


def cheap_layer_count(model: str, revision: str | None = None) -> int | None:
    """The model's number of layers read from its header alone (a GGUF's metadata, a folder's
    config.json), to refuse a bad --layer before the model loads (SmolLM2 takes many seconds to
    load); ``None`` when that cannot be known cheaply (a model type without the usual field, a
    model that cannot be found): the library then checks it after loading."""
    try:  # torch-free up to a Hub id: the refusal comes in about a second
        from steerformer.gguf_source import gguf_file_of, gguf_layer_count, read_gguf_header

        gguf = gguf_file_of(model)
        if gguf is not None:  # the header's block count: no transformers, no tensor read
            return gguf_layer_count(read_gguf_header(gguf))
        if Path(model).expanduser().is_dir() and revision is None:
            config = read_json(Path(model).expanduser() / "config.json")
        else:  # a Hub id resolves to the cache (or is downloaded, which the load would do anyway)
            from steerformer.consistency import read_config_json
            from steerformer.loading import resolve_checkpoint

            config = read_config_json(resolve_checkpoint(str(model), revision=revision)[0])
    except Exception:  # noqa: BLE001 - the load that follows raises the real error, with its own words
        return None
    for field in ("num_hidden_layers", "n_layer", "num_layers"):
        n = config.get(field) if isinstance(config, dict) else None
        if isinstance(n, int) and n > 0:
            return n
    return None


def check_layers_early(model: str, layers, flag: str, revision: str | None = None) -> None:
    """Refuse layer indices out of the model's range before loading it (see cheap_layer_count)."""
    if layers is None:
        return
    n = cheap_layer_count(model, revision)
    if n is None:
        return
    if isinstance(layers, int):  # one layer (--layer): shown as given
        if not -n <= layers < n:
            raise bad_argument(flag, layers, f"layer indices in [-{n}, {n - 1}] (the model has {n} layers)")
        return
    select_layers(layers, n, name=flag)


@contextlib.contextmanager
def library_bars(show: bool) -> Iterator[None]:
    """With ``show`` false (``--quiet``), transformers' and huggingface_hub's own progress bars
    ("Loading weights", "Writing model shards") are off too while the command runs."""
    if show:
        yield
        return
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    disable_progress_bars()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
        enable_progress_bars()
