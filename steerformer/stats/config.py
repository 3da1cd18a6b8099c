"""What the power-method experiment runs: :class:`StatsConfig`, shared by `analyze`,
`power_method_stats` and the CLI (which builds its options from the fields), so the options are
declared (and checked) once. Defined in the import-light :mod:`steerformer.configs`."""

from __future__ import annotations

from ..configs import StatsConfig

__all__ = ["StatsConfig"]
