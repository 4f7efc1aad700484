"""An append-only, HMAC-chained audit log (JSONL).

Each entry is canonical JSON with ``seq`` (1-based), ``event``, ``ts``, ``data``, ``prev``
(the previous entry's digest; 64 zeros for the first), ``hmac`` and ``digest``:

    hmac   = HMAC-SHA256(key, prev + "\\n" + canonical(seq, event, ts, data, prev))
    digest = SHA-256(canonical(seq, event, ts, data, prev, hmac))

so editing, reordering or dropping an entry breaks its own HMAC or the next entry's
``prev``. Cutting the chain short (or emptying it) breaks no link, so ``chain.head`` records
how many entries there are and the last digest, HMAC'd with the key: a shorter chain no
longer matches its head, and a head for the shorter chain cannot be made without the key.
The key is ``chain.key`` beside ``chain.jsonl``, created with mode 0600 in a 0700 directory;
a key file readable by group or others is refused. An append verifies the whole chain and
its head first and holds an exclusive ``flock``; any failure raises ``AuditError`` (exit 4).
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
from ..perms import PRIVATE_DIR_MODE, can_create_in, make_dir

EXIT_AUDIT = 4
CHAIN = "chain.jsonl"
KEY = "chain.key"
HEAD = "chain.head"
GENESIS = "0" * 64


class AuditError(EvalfarmError):
    """The audit chain could not be appended to or read."""

    exit_code = EXIT_AUDIT


@dataclass(frozen=True)
class Broken:
    seq: int
    line: int | None  # None: the chain as a whole does not match its head
    reason: str

    def __str__(self) -> str:
        return f"entry {self.seq} (line {self.line}): {self.reason}" if self.line else \
            f"entry {self.seq}: {self.reason}"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_key(audit_dir: Path, create: bool = False) -> bytes:
    path = Path(audit_dir) / KEY
    if not path.exists():
        if not create:
            raise AuditError(f"audit key not found: {path}")
        try:
            make_dir(audit_dir, PRIVATE_DIR_MODE)
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
        except (ValueError, KeyError, TypeError, RecursionError):
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


def _head_mac(key: bytes, count: int, digest: str) -> str:
    return hmac.new(key, f"evalfarm.audit.head\n{count}\n{digest}".encode("ascii"), "sha256").hexdigest()


def _write_head(audit_dir: Path, key: bytes, good: list[dict[str, Any]]) -> None:
    """Replace ``chain.head`` atomically (0600): the count of entries and the last digest, signed."""
    count, digest = len(good), good[-1]["digest"] if good else GENESIS
    body = canonical_json({"count": count, "digest": digest, "hmac": _head_mac(key, count, digest)})
    tmp = Path(audit_dir) / f".{HEAD}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(body + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, Path(audit_dir) / HEAD)


def _read_head(audit_dir: Path) -> bytes | None | OSError:
    try:
        return (Path(audit_dir) / HEAD).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc


_UNREAD: Any = object()


def check_head(audit_dir: Path, key: bytes, good: list[dict[str, Any]],
               raw: bytes | None | OSError = _UNREAD) -> Broken | None:
    """Does an intact chain of ``good`` entries end where ``chain.head`` says it does? ``raw``: the
    head as the caller already read it under the chain's lock (else it is read here)."""
    path = Path(audit_dir) / HEAD
    if raw is _UNREAD:  # the caller holds the chain's lock: nothing moves
        raw = _read_head(audit_dir)
    if raw is None:
        if not good:
            return None
        return Broken(len(good), None, f"{HEAD} is missing, so a cut could go unnoticed (a chain from before "
                                       "heads, or the head was deleted); once the chain is known to be whole, "
                                       "'evalfarm audit verify --seal' writes one")
    if isinstance(raw, OSError):
        return Broken(len(good), None, f"cannot read {path}: {_why(raw)}")
    try:
        head = json.loads(raw)
        count, digest, mac = head["count"], head["digest"], head["hmac"]
        valid = isinstance(count, int) and not isinstance(count, bool) and count >= 0 and isinstance(digest, str) \
            and isinstance(mac, str)
    except (ValueError, KeyError, TypeError, RecursionError):
        valid = False
    if not valid:
        return Broken(len(good) + 1, None, f"{HEAD} is not a chain head")
    if not hmac.compare_digest(_head_mac(key, count, digest), mac):
        return Broken(len(good) + 1, None, f"{HEAD}: HMAC mismatch (edited, or signed with another key)")
    if count > len(good):
        return Broken(len(good) + 1, None, f"missing: the chain ends after {len(good)} entr"
                                           f"{'y' if len(good) == 1 else 'ies'} but its head records {count} "
                                           "(the chain was cut short or emptied)")
    expected = good[count - 1]["digest"] if count else GENESIS
    if digest != expected:
        return Broken(count, None, f"entry {count}'s digest is not the one its head records")
    return None  # entries past the head are signed with the key: an append whose head update was cut off


def verify(audit_dir: Path) -> tuple[list[dict[str, Any]], Broken | None]:
    """The intact entries, and the first problem: a broken entry, or a chain that does not end
    where its head says (cut short, emptied, or the head removed)."""
    path = Path(audit_dir) / CHAIN
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        head = _read_head(audit_dir)
        if head is None:
            raise AuditError(f"no audit chain at {path}") from None
        raw = b""  # the chain was deleted: its head still says how many entries there were
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {_why(exc)}") from None
    else:
        # A shared lock: an append (exclusive lock) writes its entry, then the head; read without
        # it, a reader can meet half a line or a head one entry ahead of the chain.
        try:
            with os.fdopen(fd, "rb") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
                head = _read_head(audit_dir)
                raw = fh.read()
        except OSError as exc:
            raise AuditError(f"cannot read {path}: {_why(exc)}") from None
    key = read_key(audit_dir)
    good, broken = check(raw, key)
    return good, broken or check_head(audit_dir, key, good, head)


def seal(audit_dir: Path) -> list[dict[str, Any]]:
    """Write the head for the chain as it is (after checking every entry); returns the entries.
    For a chain written before heads existed: it vouches for the chain's current length."""
    audit_dir = Path(audit_dir)
    key = read_key(audit_dir)
    try:
        fd = os.open(audit_dir / CHAIN, os.O_RDWR)
    except OSError as exc:
        raise AuditError(f"cannot open {audit_dir / CHAIN}: {_why(exc)}") from None
    with os.fdopen(fd, "r+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        good, broken = check(fh.read(), key)
        if broken is not None:
            raise AuditError(f"the audit chain is broken at {broken}; a head would vouch for a broken chain")
        try:
            _write_head(audit_dir, key, good)
        except OSError as exc:
            raise AuditError(f"cannot write {audit_dir / HEAD}: {_why(exc)}") from None
    return good


def check_appendable(audit_dir: Path) -> None:
    """Before a run spends anything: the chain it will be anchored in can be extended (its
    directory writable, its key private, the chain and its head intact), or AuditError now."""
    audit_dir = Path(audit_dir)
    probe = audit_dir
    while not probe.exists():
        probe = probe.parent
    why = "not a directory" if not probe.is_dir() else can_create_in(probe)
    if why:
        what = f"append to the audit chain in {audit_dir}" if (audit_dir / KEY).exists() else \
            f"create the audit key {audit_dir / KEY}"
        raise AuditError(f"cannot {what}: {probe}: {why}; nothing was run")
    if (audit_dir / KEY).exists():
        read_key(audit_dir)
    if (audit_dir / CHAIN).exists() or (audit_dir / HEAD).exists():
        _, broken = verify(audit_dir)
        if broken is not None:
            raise AuditError(f"the audit chain {audit_dir / CHAIN} is broken at {broken}; refusing to extend it, so "
                             f"nothing was run ('evalfarm audit verify --audit-dir {audit_dir}')")


def append(audit_dir: Path, event: str, data: dict[str, Any], ts: str | None = None) -> dict[str, Any]:
    """Append one entry after verifying the chain; returns the entry. Raises AuditError."""
    audit_dir = Path(audit_dir)
    path = audit_dir / CHAIN
    try:
        make_dir(audit_dir, PRIVATE_DIR_MODE)
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
            broken = broken or check_head(audit_dir, key, good)
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
            _write_head(audit_dir, key, [*good, entry])  # still under the lock
    except OSError as exc:
        raise AuditError(f"cannot append to the audit chain {path}: {_why(exc)}") from None
    return entry
