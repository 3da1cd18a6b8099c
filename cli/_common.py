"""Shared CLI helpers: turn library errors into one clean line and exit code 2."""

from __future__ import annotations

import contextlib
import re
import typing
from typing import Iterator

import typer

from steerformer.errors import SteerformerError, bad_argument


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a steerformer error as one line on stderr (no traceback) and exit with status 2."""
    try:
        yield
    except SteerformerError as exc:
        typer.echo(f"error: {cli_message(exc)}", err=True)
        raise typer.Exit(code=2) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(code=130) from None


#: No model has this many layers; a longer --layers range is a typo (and would fill memory).
MAX_LAYERS = 100_000


# Library argument name -> CLI flag, where the command's own parameter has another name.
# Names that match a parameter of the running command (``direction`` -> ``--direction``) need no entry.
FLAG_OF_ARGUMENT: dict[str, str] = {
    "early_stop_tol": "--early-stop",
    "texts": "--text",
}


def _current_context():
    try:  # typer >= 0.2x vendors click; older typer runs on click itself
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import get_current_context
    return get_current_context(silent=True)


#: The same for one command only: ``save_steered(directory=...)`` is what ``steer --out`` names.
FLAG_OF_ARGUMENT_IN: dict[str, dict[str, str]] = {
    "steer": {"directory": "--out"},
    "make": {"directory": "--out"},  # direction make: Direction.save(directory)
}


def flag_of(argument: str) -> str | None:
    """The flag the running command uses for a library argument name; ``None`` outside a command,
    for a positional argument (its message keeps the name) or when the command has no such option."""
    ctx = _current_context()
    params = {p.name: p for p in ctx.command.params} if ctx is not None else {}
    own = FLAG_OF_ARGUMENT_IN.get(ctx.command.name, {}) if ctx is not None else {}
    name = own.get(argument) or FLAG_OF_ARGUMENT.get(argument, argument)
    if name.startswith("-"):
        return name
    p = params.get(name)
    if p is None:
        return None
    if getattr(p, "param_type_name", "") != "option":
        return None
    long = [o for o in p.opts if o.startswith("--")]
    return (long or list(p.opts))[0]


def cli_message(exc: BaseException) -> str:
    """The error's message with the library's argument name replaced by the command's flag.

    Library errors name Python arguments (``direction='x.npy' is invalid``); on the command line
    the same error names the flag (``--direction='x.npy' is invalid``).
    """
    msg = str(exc)
    if getattr(exc, "argument", None) is None:
        return msg
    names = set(FLAG_OF_ARGUMENT)
    ctx = _current_context()
    if ctx is not None:
        names |= {p.name for p in ctx.command.params if p.name} | set(FLAG_OF_ARGUMENT_IN.get(ctx.command.name, {}))
    for name in sorted(names, key=len, reverse=True):
        flag = flag_of(name)
        if flag is not None:  # "name=" and "name (" (how bad_argument names things), not the word in prose
            msg = re.sub(rf"(?<![\w-]){re.escape(name)}(?=\s?[=(])", flag, msg)
    return msg


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
    from steerformer.outputs import KINDS, RECORD, check_output_file, check_output_folder

    if out is not None and kind is not None:
        check_output_folder(out, KINDS[kind], overwrite=overwrite, inputs=inputs, name="--out",
                            incremental=incremental)
    if record is not None:
        check_output_file(record, RECORD, overwrite=overwrite, inputs=inputs, outputs=[out], name="--record")
    if device is not None:
        from steerformer.loading import check_device

        check_device(device, name="--device")


def check_input_files(**files) -> None:
    """Each given ``flag_name=path`` (``--positive`` as ``positive``) names an existing file."""
    from pathlib import Path

    for name, path in files.items():
        if path is not None and not Path(path).expanduser().is_file():
            flag = "--" + name.replace("_", "-")
            what = "a folder" if Path(path).expanduser().is_dir() else "not found"
            raise bad_argument(flag, str(path), f"an existing file ({what})", "Check the path.")


def config_options(cls, *, into: str = "options", names: tuple[str, ...] | None = None):
    """Decorator: one typer option per command-line field of the dataclass config ``cls``
    (:mod:`steerformer.configs`), built from the field's metadata (flag, help, type, choices) —
    the single declaration of each option. The options take the place of the command's parameter
    ``into``, which receives ``{field: value}`` (inverted flags negated, choices as strings) to build
    the config inside ``user_errors()``. ``names``: only these fields."""
    import dataclasses
    import functools
    import inspect
    from enum import Enum

    def deco(f):
        sig = inspect.signature(f)
        hints = typing.get_type_hints(f)
        conv: dict[str, tuple[str, typing.Callable]] = {}
        generated = []
        for fl in dataclasses.fields(cls):
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
                    ann = Enum(f"{cls.__name__}_{fl.name}", {c.replace("-", "_"): c for c in md["choices"]}, type=str)
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
    from pathlib import Path

    from steerformer.outputs import safe_folder_name

    local = Path(model).expanduser()
    return Path("runs") / command / safe_folder_name(local.resolve().name if local.is_dir() else model)
