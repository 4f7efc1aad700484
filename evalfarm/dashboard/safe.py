"""Untrusted input, made safe to show: names used in paths, values of the wrong type.

Reports, artifacts and Redis values are read from disk or the network and may be
hand-edited or corrupt. Every value the pages show passes through one of these
coercions, so one bad field renders as "n/a" instead of a 500, and no name taken
from a URL or a file ever reaches the filesystem unchecked.
"""
from __future__ import annotations

import math
import re
from typing import Any

from ..core.report.index import cut_text
from ..names import is_run_id

_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[^\x00-\x1f/\\]{1,200}")


class BadRef(ValueError):
    """A run id, artifact name or baseline name that is malformed or unknown (HTTP 400/404)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def run_id(value: Any) -> str:
    """A run id (the one format of ``evalfarm.names``) fit to become ``runs/<id>.json``."""
    if not is_run_id(value):
        raise BadRef(f"not a run id: {text(value, 80)!r}")
    return value


def is_sha256(value: Any) -> bool:
    return isinstance(value, str) and bool(_SHA256.fullmatch(value))


def sha256_name(value: Any) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise BadRef(f"not an artifact address (64 lowercase hex digits): {text(value, 80)!r}")
    return value


def name(value: Any, what: str = "name") -> str:
    """A baseline name or similar label: printable, no path separators."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise BadRef(f"not a valid {what}: {text(value, 80)!r}")
    return value


def num(value: Any) -> float | None:
    """A finite number or None (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def count(value: Any) -> int:
    """A non-negative whole number; anything else counts 0."""
    v = num(value)
    return int(v) if v is not None and v >= 0 else 0


def flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def text(value: Any, limit: int | None = None) -> str:
    """Any value as display text (a dict or list as JSON); ``limit`` caps the length."""
    return cut_text(value, limit)


def opt_text(value: Any, limit: int | None = None) -> str | None:
    return None if value is None else text(value, limit)


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def seq(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def str_list(value: Any) -> list[str]:
    return [text(v, 200) for v in seq(value)]


def int_map(value: Any) -> dict[str, int]:
    """{name: count} with every key a string and every count a whole number."""
    return {text(k, 200): count(v) for k, v in mapping(value).items()}
