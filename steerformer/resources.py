"""Resource guards: the memory a count implies, estimated and refused before anything is allocated
(``collapse --n-prompts 1000000000`` is one line saying what it needs, not an allocation error)."""

from __future__ import annotations

import os

from .errors import InvalidArgumentError, bad_argument

GiB = 1 << 30


def physical_memory() -> int | None:
    """Bytes of RAM of this machine (None where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(need: int, name: str, value: object, what: str) -> None:
    """Refuse ``name=value`` when ``need`` bytes (the estimate for ``what``, e.g. "1,000,000,000 prompts
    × 200 tokens") exceed this machine's memory: one line saying "needs N GiB", and for a count the
    value that would fit (the estimate is proportional to it)."""
    have = physical_memory()
    if have is None or need <= have:
        return
    fix = None
    if type(value) is int:
        fix = f"Use {name}={max(1, int(value * have / need))} or fewer."
    raise bad_argument(name, value, f"a size that fits in memory: {what} needs about {need / GiB:,.1f} GiB, this "
                       f"machine has {have / GiB:,.0f} GiB", fix)


__all__ = ["GiB", "InvalidArgumentError", "check_fits", "physical_memory"]
