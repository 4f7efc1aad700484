"""EVALFARM_* settings read from the environment: a bad value is one line naming the variable."""
from __future__ import annotations

import os

from .errors import UsageError


def env_int(name: str, default: int | None, lo: int, hi: int) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a whole number from {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise UsageError(f"{name}={value}: expected a whole number from {lo} to {hi}")
    return value


def env_float(name: str, default: float, lo: float, hi: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected a number from {lo:g} to {hi:g}") from None
    if not lo <= value <= hi:  # NaN fails this too
        raise UsageError(f"{name}={raw}: expected a number from {lo:g} to {hi:g}")
    return value
