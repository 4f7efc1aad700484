"""Canonical JSON and content hashes: the same data always gives the same bytes."""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(data: Any) -> str:
    """Sorted keys, compact separators, ASCII escapes: stable across runs and machines."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_key(data: Any) -> str:
    """Hash of the canonical JSON of ``data``."""
    return sha256_hex(canonical_json(data))
