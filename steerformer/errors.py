"""Exceptions raised by steerformer.

Every error names the argument, the value received and what would be valid, so that a user
never has to read a traceback from deep inside torch or transformers to know what to fix.
"""

from __future__ import annotations


class SteerformerError(Exception):
    """Base class of every error steerformer raises on purpose."""


class InvalidArgumentError(SteerformerError, ValueError):
    """An argument has a value that cannot be used (wrong shape, range, type...).

    ``argument`` is the name of the argument when known (set by :func:`bad_argument`); the CLI
    uses it to name the flag instead (``--direction`` for ``direction``).
    """

    argument: str | None = None


class UnsupportedModelError(SteerformerError, ValueError):
    """The model's ``config.model_type`` has no adapter."""


class ModelNotFoundError(SteerformerError, FileNotFoundError):
    """A model id or path could not be resolved to weights."""


class CheckpointError(SteerformerError, RuntimeError):
    """A checkpoint exists but cannot be read the way it was asked (missing tensor, non-finite...)."""


class FileFormatError(SteerformerError, ValueError):
    """A file steerformer reads is not in the format it needs (JSON that does not parse or nests
    deeper than any file steerformer or transformers writes, a header that lies...). ``reason``: the
    message without the file name."""

    reason: str = ""


class NonFiniteStateError(SteerformerError, FloatingPointError):
    """A simulated or looped state became NaN/inf. ``t`` is the last time (or pass) it was finite,
    ``partial`` what was computed up to then."""

    def __init__(self, message: str, t: float | None = None, partial: object | None = None) -> None:
        super().__init__(message)
        self.t = t
        self.partial = partial


def bad_argument(name: str, value: object, expected: str, fix: str | None = None) -> InvalidArgumentError:
    """Build the standard message: ``name=value is invalid: expected ...; fix``."""
    shown = repr(value)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    msg = f"{name}={shown} is invalid: expected {expected}."
    if fix:
        msg += f" {fix}"
    err = InvalidArgumentError(msg)
    err.argument = name
    return err
