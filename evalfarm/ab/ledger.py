"""The spend ledger: JSONL, one row per run, each row referenced by the SHA-256 of its line.

A row reference is ``sha256(line bytes)`` where the line bytes exclude the trailing
newline. Rows are written as canonical JSON, so the same run always gives the same bytes;
appending a row whose exact bytes are already present is a no-op (a repeated
deterministic run does not double the ledger). Appends hold an exclusive ``flock``.
"""
from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..canonical import canonical_json, sha256_hex
from ..errors import UsageError
from ..perms import make_dir


@dataclass(frozen=True)
class LedgerRow:
    sha256: str
    line: int  # 1-based line number in the ledger file
    data: dict[str, Any] | None  # None: the line is not a JSON object


def row_bytes(row: dict[str, Any]) -> bytes:
    return canonical_json(row).encode("utf-8")


def row_ref(raw: bytes) -> str:
    return sha256_hex(raw)


def _iter_lines(raw: bytes) -> Iterable[tuple[int, bytes]]:
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if line.strip():
            yield lineno, line


def load(path: Path) -> dict[str, LedgerRow]:
    """Index a ledger by row reference. A missing ledger is a usage error."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"ledger not found: {path}; pass --ledger with the ledger the artifact was made from") from None
    except OSError as exc:
        raise UsageError(f"cannot read ledger {path}: {exc.strerror}") from None
    out: dict[str, LedgerRow] = {}
    for lineno, line in _iter_lines(raw):
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            data = None
        ref = row_ref(line)
        out.setdefault(ref, LedgerRow(ref, lineno, data if isinstance(data, dict) else None))
    return out


def append_rows(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """Append rows not already present (by exact bytes); return every row's reference, in order."""
    path = Path(path)
    try:
        make_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise UsageError(f"cannot open ledger {path}: {exc.strerror}") from None
    with os.fdopen(fd, "r+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        fh.seek(0)
        existing = fh.read()
        present = {row_ref(line) for _, line in _iter_lines(existing)}
        refs, new = [], []
        for row in rows:
            raw = row_bytes(row)
            ref = row_ref(raw)
            refs.append(ref)
            if ref not in present:
                present.add(ref)
                new.append(raw)
        if new:
            prefix = b"\n" if existing and not existing.endswith(b"\n") else b""
            fh.write(prefix + b"".join(line + b"\n" for line in new))
            fh.flush()
            os.fsync(fh.fileno())
    return refs
