"""An append-only, HMAC-chained audit log (JSONL).

Each entry is canonical JSON with ``seq`` (1-based), ``event``, ``ts``, ``data``, ``prev``
(the previous entry's digest; 64 zeros for the first), ``hmac`` and ``digest``:

    hmac   = HMAC-SHA256(key, prev + "\\n" + canonical(seq, event, ts, data, prev))
    digest = SHA-256(canonical(seq, event, ts, data, prev, hmac))

so editing, reordering or dropping an entry breaks its own HMAC or the next entry's
``prev``. The key is ``chain.key`` beside ``chain.jsonl``, created with mode 0600; a key
file readable by group or others is refused. An append verifies the whole chain first
and holds an exclusive ``flock``; any failure raises ``AuditError`` (exit code 4).
"""
from __future__ import annotations

import fcntl
import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..canonical import canonical_json, sha256_hex
from ..errors import EvalfarmError

EXIT_AUDIT = 4
CHAIN = "chain.jsonl"
KEY = "chain.key"
GENESIS = "0" * 64


class AuditError(EvalfarmError):
    """The audit chain could not be appended to or read."""

    exit_code = EXIT_AUDIT


@dataclass(frozen=True)
class Broken:
    seq: int
    line: int
    reason: str

    def __str__(self) -> str:
        return f"entry {self.seq} (line {self.line}): {self.reason}"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_key(audit_dir: Path, create: bool = False) -> bytes:
    path = Path(audit_dir) / KEY
    if not path.exists():
        if not create:
            raise AuditError(f"audit key not found: {path}")
        try:
            Path(audit_dir).mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
        except FileExistsError:
            pass
        except OSError as exc:
            raise AuditError(f"cannot create the audit key {path}: {_why(exc)}") from None
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise AuditError(f"audit key {path} has mode {stat.S_IMODE(mode):04o}; it must be 0600 (chmod 600 {path})")
        key = path.read_text(encoding="ascii").strip()
    except OSError as exc:
        raise AuditError(f"cannot read the audit key {path}: {_why(exc)}") from None
    if len(key) < 32:
        raise AuditError(f"audit key {path} is too short")
    return key.encode("ascii")


def _sign(key: bytes, content: dict[str, Any]) -> str:
    return hmac.new(key, (content["prev"] + "\n" + canonical_json(content)).encode("utf-8"), "sha256").hexdigest()


def _digest(content: dict[str, Any], mac: str) -> str:
    return sha256_hex(canonical_json({**content, "hmac": mac}))


def _entries(raw: bytes) -> list[tuple[int, bytes]]:
    return [(n, line) for n, line in enumerate(raw.split(b"\n"), start=1) if line.strip()]


def check(raw: bytes, key: bytes) -> tuple[list[dict[str, Any]], Broken | None]:
    """Walk the chain; return the good entries and the first broken one (or None)."""
    good: list[dict[str, Any]] = []
    prev = GENESIS
    for index, (lineno, line) in enumerate(_entries(raw), start=1):
        try:
            entry = json.loads(line)
            content = {k: entry[k] for k in ("seq", "event", "ts", "data", "prev")}
            mac, digest = entry["hmac"], entry["digest"]
        except (ValueError, KeyError, TypeError):
            return good, Broken(index, lineno, "not a chain entry (unparsable or fields missing)")
        if set(entry) != {"seq", "event", "ts", "data", "prev", "hmac", "digest"}:
            return good, Broken(index, lineno, "unexpected fields")
        if content["seq"] != index:
            return good, Broken(index, lineno, f"seq is {content['seq']!r}, expected {index} (entry missing or reordered)")
        if content["prev"] != prev:
            return good, Broken(index, lineno, "prev does not match the previous entry's digest")
        if not hmac.compare_digest(_sign(key, content), str(mac)):
            return good, Broken(index, lineno, "HMAC mismatch (content edited or signed with another key)")
        if _digest(content, mac) != digest:
            return good, Broken(index, lineno, "digest mismatch")
        good.append(entry)
        prev = digest
    return good, None


def verify(audit_dir: Path) -> tuple[list[dict[str, Any]], Broken | None]:
    path = Path(audit_dir) / CHAIN
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AuditError(f"no audit chain at {path}") from None
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {_why(exc)}") from None
    return check(raw, read_key(audit_dir))


def append(audit_dir: Path, event: str, data: dict[str, Any], ts: str | None = None) -> dict[str, Any]:
    """Append one entry after verifying the chain; returns the entry. Raises AuditError."""
    audit_dir = Path(audit_dir)
    path = audit_dir / CHAIN
    try:
        audit_dir.mkdir(parents=True, exist_ok=True)
        key = read_key(audit_dir, create=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    except AuditError:
        raise
    except OSError as exc:
        raise AuditError(f"cannot append to the audit chain {path}: {_why(exc)}") from None
    try:
        with os.fdopen(fd, "r+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            fh.seek(0)
            raw = fh.read()
            good, broken = check(raw, key)
            if broken is not None:
                raise AuditError(f"the audit chain {path} is broken at {broken}; refusing to extend it "
                                 f"('evalfarm audit verify --audit-dir {audit_dir}')")
            content = {"seq": len(good) + 1, "event": event,
                       "ts": ts or datetime.now(timezone.utc).isoformat(timespec="microseconds"),
                       "data": data, "prev": good[-1]["digest"] if good else GENESIS}
            mac = _sign(key, content)
            entry = {**content, "hmac": mac, "digest": _digest(content, mac)}
            prefix = b"\n" if raw and not raw.endswith(b"\n") else b""
            fh.write(prefix + canonical_json(entry).encode("utf-8") + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise AuditError(f"cannot append to the audit chain {path}: {_why(exc)}") from None
    return entry
