"""Reports as trusted inputs: what gate, baseline, diff, rescore and export check before they rely on
a stored report.

A report is a file anyone with write access can edit; a gate that believes its flags passes a
failed run whose ``passed`` was flipped. Three checks, each one line and exit 2 when it fails:

1. **Lineage.** ``<run>.lineage.json`` beside a saved report records the SHA-256 of its bytes
   (``content_hash``); a report that no longer hashes to it was edited. ``load_report`` checks it
   for every reader.
2. **Seal.** Saving a report (``archive.save_report``: ``run``, ``wait``, ``rescore``, the Python API,
   a ``baseline`` imported from elsewhere) seals that hash: a row of ``registry.db``'s
   ``report_seals`` holds it with an HMAC under the state dir's key
   (``keys/reports.key``, 0600 in a 0700 directory, made on the first save; like the audit chain's
   key). A report of a sealed run, wherever it is now (the saved file, an ``--output`` copy), must
   hash to the sealed value; rewriting the lineage stub too does not help, and a seal that does not
   verify is refused. A run saved before seals existed is checked against its lineage stub only,
   and the command says so.
3. **Verdicts.** ``gate`` decides every verdict again from the outputs (``core.recheck``); a report
   whose stored flags disagree with its outputs is refused unless it is sealed (then the checks
   changed since the run, and the gate decides on today's verdicts, saying so). An unsealed report
   (a stub alone can be rewritten) is held to its outputs by gate, baseline and diff alike.

A report recorded nowhere (no stub beside it, no registry entry: a file from another machine or a
CI job's artifact) is accepted by gate, diff and baseline (which imports and seals a copy) only when
its stored verdicts are what its outputs earn (checked again as in 3), since a decision rests on
them; ``rescore`` (it scores the outputs again and never reads the stored verdicts) and ``export``
(a change of format: the verdicts travel as they are) take it as it is. Each says so on stderr.

Limits, stated: whoever can read the key can make seals (as with the audit chain: keep the state
dir private); a report forged whole, outputs included, is consistent with itself and is only
caught by a seal; the judge's scores and an agent's own check results cannot be decided again from
the file, so for an unsealed report they are taken as stored (the gate says so).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import stat
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core.recheck import Rechecked, RecheckError, recheck
from ..core.report.schema import report_problem
from ..errors import UsageError
from ..perms import PRIVATE_DIR_MODE, file_mode, make_dir
from .state import StateDir

SEALED, SAVED, UNRECORDED = "sealed", "saved", "unrecorded"
# the uses that take a report recorded nowhere as it is (no decision rests on its stored verdicts)
AS_IT_IS = {"rescore": "its outputs are scored again, its stored verdicts are not read",
            "export": "exported as it is; its stored verdicts were not checked against its outputs"}
LINEAGE = ".lineage.json"
_TABLE = ("CREATE TABLE IF NOT EXISTS report_seals (run_id TEXT PRIMARY KEY, content_hash TEXT NOT NULL, "
          "kind TEXT NOT NULL, sealed_at TEXT NOT NULL, mac TEXT NOT NULL)")
_CHUNK = 1 << 20


def stub_of(path: Path) -> Path:
    """The lineage stub saved beside ``<run_id>.json``."""
    path = Path(path)
    return path.with_name(path.name[:-5] + LINEAGE if path.name.endswith(".json") else path.name + LINEAGE)


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes, read a megabyte at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _recorded_hash(stub: Path) -> str | None:
    """The ``content_hash`` a lineage stub records; None when there is no stub."""
    try:
        raw = stub.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{stub}: cannot read the lineage stub ({exc.strerror or exc})") from None
    try:
        value = json.loads(raw).get("content_hash")
    except (ValueError, AttributeError, RecursionError):
        value = None
    if not isinstance(value, str) or not value.startswith("sha256:"):
        raise UsageError(f"{stub}: not a lineage stub (no content_hash); the report beside it cannot be vouched for")
    return value


def _short(digest: str) -> str:
    return digest[:19] + "..."


def check_lineage(path: Path, digest: str) -> bool:
    """Does the report at ``path`` (hashing to ``digest``) match the lineage stub beside it? True when
    it does, False when there is no stub; a mismatch is exit 2."""
    recorded = _recorded_hash(stub_of(path))
    if recorded is None:
        return False
    if recorded != digest:
        raise UsageError(f"{path}: edited after it was saved: its bytes hash to {_short(digest)}, its lineage stub "
                         f"{stub_of(path).name} records {_short(recorded)}")
    return True


def read_report(path: Path) -> tuple[dict[str, Any], str]:
    """A stored report checked for the shape every reader relies on and against the lineage stub
    beside it, if any; (report, ``sha256:`` of its bytes). Exit 2 otherwise."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: not a readable evalfarm report ({exc.strerror or exc})") from None
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    try:
        data = json.loads(raw)
    except RecursionError:
        raise UsageError(f"{path}: not a readable evalfarm report (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable evalfarm report ({exc})") from None
    del raw
    problem = report_problem(data)
    if problem:
        raise UsageError(f"{path}: not an evalfarm report ({problem})")
    check_lineage(path, digest)
    return data, digest


# -- the key and the seals ---------------------------------------------------------------------------

def _key(state: StateDir, create: bool) -> bytes | None:
    path = state.seal_key
    if not path.exists():
        if not create:
            return None
        try:
            make_dir(path.parent, PRIVATE_DIR_MODE)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32) + "\n")
        except FileExistsError:
            pass
        except OSError as exc:
            raise UsageError(f"cannot create the report seal key {path}: {exc.strerror or exc}") from None
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsageError(f"report seal key {path} has mode {stat.S_IMODE(mode):04o}; it must be 0600 "
                             f"(chmod 600 {path})")
        key = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the report seal key {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if len(key) < 32:
        raise UsageError(f"report seal key {path} is too short")
    return key.encode("ascii")


def _mac(key: bytes, run_id: str, digest: str, kind: str, sealed_at: str) -> str:
    return hmac.new(key, f"evalfarm.report.seal\n{run_id}\n{digest}\n{kind}\n{sealed_at}".encode("utf-8"),
                    "sha256").hexdigest()


def seal(state_dir: Path | str | StateDir, run_id: str, digest: str, kind: str = "saved") -> None:
    """Seal a report's hash as it is saved (``archive.save_report``): a row of ``report_seals`` in the
    registry with an HMAC under the state dir's key. The first seal of a run stays: sealing again
    (after an edit) changes nothing."""
    state = StateDir.of(state_dir)
    key = _key(state, create=True)
    sealed_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    new = not state.registry_db.exists()
    try:
        with closing(sqlite3.connect(state.registry_db, timeout=30)) as conn, conn:
            if new:  # SQLite creates it 0666 narrowed by the umask (runs.registry does the same)
                os.chmod(state.registry_db, file_mode())
            conn.execute(_TABLE)
            conn.execute("INSERT OR IGNORE INTO report_seals (run_id, content_hash, kind, sealed_at, mac) "
                         "VALUES (?, ?, ?, ?, ?)", (run_id, digest, kind, sealed_at,
                                                    _mac(key, run_id, digest, kind, sealed_at)))
    except sqlite3.Error as exc:
        raise UsageError(f"{state.registry_db}: cannot seal run {run_id}'s report ({exc})") from None


def _registry_rows(state: StateDir, run_id: str) -> tuple[tuple | None, str | None]:
    """(the run's seal row, its artifact path as the registry records it), read-only."""
    if not state.registry_db.is_file():
        return None, None
    try:
        with closing(sqlite3.connect(f"file:{state.registry_db.resolve()}?mode=ro", uri=True, timeout=30)) as conn:
            has = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'report_seals'").fetchone()
            row = conn.execute("SELECT content_hash, kind, sealed_at, mac FROM report_seals WHERE run_id = ?",
                               (run_id,)).fetchone() if has else None
            runs = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone()
            art = conn.execute("SELECT artifact FROM runs WHERE run_id = ?", (run_id,)).fetchone() if runs else None
    except sqlite3.Error as exc:
        raise UsageError(f"{state.registry_db}: cannot read the run registry ({exc})") from None
    return row, (art[0] if art and art[0] else None)


# -- loading a report to rely on ---------------------------------------------------------------------

@dataclass
class Trusted:
    report: dict[str, Any]
    path: Path
    digest: str
    level: str  # SEALED, SAVED or UNRECORDED
    notes: list[str] = field(default_factory=list)  # what the command says on stderr
    rechecked: Rechecked | None = None  # the verdicts decided again (an unrecorded report's, on load)


def load_trusted(path: Path, state_dir: Path | str | StateDir, use: str) -> Trusted:
    """The report at ``path``, checked before ``use`` (gate, baseline, diff, rescore, export) relies on
    it: against the lineage stub beside it, the registry's seal of its run, and, for a report recorded
    nowhere, its own outputs (see the module docstring). Exit 2 with one line naming the file and what
    does not match. Reads the file whole: ``read_trusted`` streams it."""
    path = Path(path)
    state = StateDir.of(state_dir)
    report, digest = read_report(path)
    trusted, recheck_it = _vouch(path, state, report, digest, use, _registry_rows(state, report["run_id"]))
    if recheck_it:
        trusted.rechecked = verdicts(trusted)
    return trusted


def _vouch(path: Path, state: StateDir, report: dict[str, Any], digest: str, use: str,
           rows: tuple[tuple | None, str | None]) -> tuple[Trusted, bool]:
    """(the report trusted at its level, whether its verdicts must be decided again before ``use``)
    from its bytes' ``digest`` and the registry's ``rows`` for its run (``_registry_rows``). The
    lineage stub beside it was checked already (``check_lineage``)."""
    run_id = report["run_id"]
    row, artifact = rows
    if row is not None:
        recorded, kind, sealed_at, mac = row
        key = _key(state, create=False)
        if key is None:
            raise UsageError(f"{path}: run {run_id} is sealed in {state.registry_db} but the seal key "
                             f"{state.seal_key} is missing; nothing can vouch for this report")
        if not hmac.compare_digest(_mac(key, run_id, str(recorded), str(kind), str(sealed_at)), str(mac)):
            raise UsageError(f"{path}: the registry's seal of run {run_id} does not verify with {state.seal_key} "
                             f"(the registry was edited, or the key replaced); nothing can vouch for this report")
        if recorded != digest:
            raise UsageError(f"{path}: run {run_id} was edited after it was saved: its bytes hash to "
                             f"{_short(digest)}, the registry sealed {_short(recorded)} at {sealed_at}")
        return Trusted(report, path, digest, SEALED), False
    beside = stub_of(path).is_file()  # read_report checked it
    saved = artifact is not None and stub_of(state.root / artifact).is_file() and \
        Path(state.root / artifact).resolve() != path.resolve()
    if saved:
        recorded = _recorded_hash(stub_of(state.root / artifact))
        if recorded != digest:
            raise UsageError(f"{path}: not the report saved as run {run_id}: its bytes hash to {_short(digest)}, "
                             f"the lineage stub of {state.root / artifact} records {_short(recorded)}")
    if beside or saved:  # a stub vouches for the bytes; nothing vouches for the stub: the outputs decide
        trusted = Trusted(report, path, digest, SAVED, [
            f"run {run_id} has no seal in {state.registry_db} (saved before reports were sealed): checked against "
            "its lineage stub" + ("" if use in AS_IT_IS else " and its verdicts against its outputs")])
        return trusted, use not in AS_IT_IS
    trusted = Trusted(report, path, digest, UNRECORDED)
    if use in AS_IT_IS:
        trusted.notes.append(f"{path}: not recorded in {state.root} (no lineage stub, no seal): {AS_IT_IS[use]}")
        return trusted, False
    trusted.notes.insert(0, f"{path}: not recorded in {state.root} (no lineage stub, no seal): accepted because its "
                            "stored verdicts are what its outputs earn (decided again)")
    return trusted, True


def verdicts(t: Trusted, thresholds: Any = None) -> Rechecked:
    """``t``'s verdicts decided again from its outputs (``core.recheck``). Stored verdicts that differ
    are exit 2 for a report nothing seals (it was edited); for a sealed one the checks changed since
    the run, and the verdicts decided now stand (a note says so)."""
    try:
        r = recheck(t.report, thresholds)
    except RecheckError as exc:
        raise UsageError(f"{t.path}: cannot decide its verdicts again ({exc})") from None
    return judged(t, r)


def judged(t: Trusted, r: Rechecked) -> Rechecked:
    """``verdicts``' ruling on ``r``, ``t``'s verdicts decided again (however they were read)."""
    if not r.rerun and t.level == UNRECORDED:
        raise UsageError(f"{t.path}: not recorded in this state dir and written without a prompts section: "
                         "nothing can vouch for its verdicts (its checks cannot be run again)")
    if r.mismatch_count:
        if t.level != SEALED:
            raise UsageError(f"{t.path}: its stored verdicts are not what its outputs earn: {r.what()}")
        t.notes.append(f"{r.mismatch_count} stored verdict(s) of run {t.report['run_id']} differ from what this "
                       f"evalfarm decides from its outputs (the checks changed since the run?); the verdicts "
                       f"decided now are used: {r.what()}")
    t.notes += [n for n in r.notes if n not in t.notes]
    return r
