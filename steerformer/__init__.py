"""steerformer: see, measure and steer how tokens move through a transformer's layers."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
