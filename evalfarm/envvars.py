"""EVALFARM_* settings read from the environment: a bad value is one line naming the variable."""
from __future__ import annotations

import os
from typing import Callable, TypeVar

from .errors import UsageError

N = TypeVar("N", int, float)


def _shown(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _env_number(name: str, default, lo: N, hi: N, parse: Callable[[str], N], what: str):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    raw = raw.strip()
    try:
        value = parse(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: expected {what} from {_shown(lo)} to {_shown(hi)}") from None
    if not lo <= value <= hi:  # NaN fails this too
        raise UsageError(f"{name}={raw}: expected {what} from {_shown(lo)} to {_shown(hi)}")
    return value


def env_int(name: str, default: int | None, lo: int, hi: int) -> int | None:
    return _env_number(name, default, lo, hi, int, "a whole number")


def env_float(name: str, default: float, lo: float, hi: float) -> float:
    return _env_number(name, default, lo, hi, float, "a number")
