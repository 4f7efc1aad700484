"""The pair index: which artifact is the latest comparison of a profile pair.

``<reports-dir>/pair_index.jsonl`` gets one line per comparison an emission reports (appended
under ``flock`` after the audit event and the artifact exist). ``latest(reports_dir, a, b)`` returns the
newest entry for the pair in either order (``entry["a"]``/``entry["b"]`` give the order the
deltas use), so a per-profile cost report can cite the A/B evidence for each pair.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from ..canonical import canonical_json
from ..perms import make_dir

INDEX = "pair_index.jsonl"


def record(reports_dir: Path, entry: dict[str, Any]) -> None:
    path = Path(reports_dir) / INDEX
    make_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with os.fdopen(fd, "ab") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        fh.write(canonical_json(entry).encode("ascii") + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def entries(reports_dir: Path) -> list[dict[str, Any]]:
    path = Path(reports_dir) / INDEX
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("artifact"), str):  # an edited line is skipped
            out.append(entry)
    return out


def latest(reports_dir: Path, a: str, b: str, suite: str | None = None) -> dict[str, Any] | None:
    """The newest entry comparing profiles ``a`` and ``b`` (either order), optionally for one suite.
    A 3-arm run indexes each of its comparisons (the honest control-vs-candidate one and the
    conflated baseline-vs-candidate one, ``label`` and ``honest`` say which); of one artifact's
    entries for the pair, the honest one comes first."""
    found = None
    for e in entries(reports_dir):
        if {e.get("a_profile"), e.get("b_profile")} == {a, b} and (suite is None or e.get("suite") == suite):
            if found is None or found.get("artifact_sha256") != e.get("artifact_sha256") or \
                    (e.get("honest") is not False and found.get("honest") is False):
                found = e
    return found
