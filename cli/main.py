"""Entry point of the ``steerformer`` console script.

Each command lives in its own module and registers itself on ``app`` (``cli/app.py``); this file
only imports them, so that adding a command never touches the others.

Start-up is kept fast (``steerformer --help`` must not load torch, transformers, matplotlib or
scipy): command modules import the library inside their command functions, and ``import
steerformer`` itself is lazy. tests/cli/test_startup.py checks it.
"""

from __future__ import annotations

from steerformer_cli.app import app

__all__ = ["app"]

# Command modules register on import (order = order in --help).
from steerformer_cli import analyze as _analyze  # noqa: F401
from steerformer_cli import collapse as _collapse  # noqa: F401
from steerformer_cli import simulate as _simulate  # noqa: F401
from steerformer_cli import steer as _steer  # noqa: F401
from steerformer_cli import chat as _chat  # noqa: F401
from steerformer_cli import evaluate as _evaluate  # noqa: F401
from steerformer_cli import direction as _direction  # noqa: F401
from steerformer_cli import models as _models  # noqa: F401
from steerformer_cli import sweep as _sweep  # noqa: F401
from steerformer_cli import export as _export  # noqa: F401
from steerformer_cli import report as _report  # noqa: F401
