"""What the reports dir says the audit chain holds: each pair-index line cites an entry
(``audit_seq``) and each artifact was anchored by an ``eval.ab_comparison`` event.

A chain cut back to an earlier length, with the head of that earlier time put back, matches
its head; the artifacts and the pair index written since still name entries the chain no
longer has, so ``audit verify`` and ``ab verify`` check them against it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .pair_index import INDEX

EVENT = "eval.ab_comparison"
_ARTIFACT = re.compile(r"[0-9a-f]{64}\.json")


def _event_for(good: list[dict[str, Any]], seq: Any, sha: Any) -> str | None:
    """Why entry ``seq`` is not the event of artifact ``sha``, else None."""
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return f"cites no audit entry (audit_seq {str(seq)[:20]!r})"
    if seq > len(good):
        return f"cites audit entry {seq}, which the chain no longer has ({len(good)} entries)"
    entry = good[seq - 1]
    if entry.get("event") != EVENT or entry.get("data", {}).get("artifact_sha256") != sha:
        return f"cites audit entry {seq}, which records something else"
    return None


def index_problems(reports_dir: Path, good: list[dict[str, Any]], sha: str | None = None) -> list[str]:
    """Pair-index lines (all, or those of artifact ``sha``) whose audit entry is not in ``good``."""
    path = Path(reports_dir) / INDEX
    if not path.is_file():
        return []
    problems = []
    for n, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            entry = None
        if not isinstance(entry, dict):
            problems.append(f"{path}:{n}: not a pair-index entry")
            continue
        cited = entry.get("artifact_sha256")
        if sha is not None and cited != sha:
            continue
        why = _event_for(good, entry.get("audit_seq"), cited)
        if why:
            problems.append(f"{path}:{n}: artifact {str(cited)[:16]} {why}")
    return problems


def artifact_problems(reports_dir: Path, good: list[dict[str, Any]]) -> list[str]:
    """Artifacts in ``reports_dir`` that no event of ``good`` anchors."""
    folder = Path(reports_dir)
    if not folder.is_dir():
        return []
    anchored = {e.get("data", {}).get("artifact_sha256") for e in good if e.get("event") == EVENT}
    return [f"{p}: no {EVENT} event in the chain anchors this artifact (removed from the chain?)"
            for p in sorted(folder.iterdir()) if _ARTIFACT.fullmatch(p.name) and p.stem not in anchored]
