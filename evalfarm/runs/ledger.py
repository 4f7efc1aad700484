"""The spend ledger, one for runs and A/B: JSONL, one row per run or agent item, each row referenced by
the SHA-256 of its line (``STATE/cost/ledger.jsonl``; the synthetic A/B executor keeps its own).

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


# -- agent items' rows -----------------------------------------------------------------------------
# One row per agent item: ``evalfarm run`` appends them when it saves a run with agent adapters, and
# ``ab --executor spawn`` adds the arm's fields to the same agent fields (``ab/spawn.py``). Appending a
# row already present adds nothing, so saving a run twice (``wait`` after ``run --detach``) is harmless.

SCHEMA = "evalfarm.ledger/1"


def agent_fields(outcome: dict[str, Any]) -> dict[str, Any]:
    """The agent's own figures from an item's outcome (None where the run was not measured)."""
    info = outcome.get("agent") or {}
    measured = outcome.get("error") is None
    diff = info.get("diff") or {}
    check = info.get("check") or {}
    return {
        "agent": info.get("agent"), "agent_version": info.get("version"),
        "models": info.get("models"), "model_pin_ok": info.get("model_pin_ok"),
        "turns": info.get("turns") if measured else None,
        "tool_calls": info.get("tool_calls") if measured else None,
        "wall_s": info.get("wall_s"), "cost_source": info.get("cost_source") if measured else None,
        "diff_files": diff.get("files") if measured else None,
        "diff_lines": (diff["insertions"] + diff["deletions"]) if measured and diff else None,
        "patch_sha256": diff.get("patch_sha256"), "check_exit": check.get("exit_code"),
        # what the agent did, step by step (agents/trajectory.py): the A/B page opens two arms' side by side
        "trajectory_sha256": info.get("trajectory_sha256"),
        # the class decides whether the run is measured (ab/compare.py): an A/B row needs it as a run row does
        **({"failure_class": outcome["failure_class"]} if outcome.get("failure_class") else {}),
        "error_message": (outcome.get("error") or {}).get("message") if not measured else None,
    }


def run_rows(run_id: str, spec_name: str | None, outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per agent item of a saved run (items of other adapters have no row: their spend is in
    the report)."""
    rows = []
    for o in outcomes:
        if not isinstance(o, dict) or not isinstance(o.get("agent"), dict):
            continue
        measured = o.get("error") is None
        costed = measured and o["agent"].get("cost_source") is not None
        rows.append({"schema": SCHEMA, "source": "run", "run_id": run_id, "spec": spec_name, "item": o.get("key"),
                     "adapter": o.get("adapter"), "prompt_id": o.get("prompt_id"), "trial": o.get("trial"),
                     "input_tokens": o.get("input_tokens", 0) if measured else None,
                     "output_tokens": o.get("output_tokens", 0) if measured else None,
                     "cost_usd": round(float(o.get("cost_usd") or 0.0), 12) if costed else None,
                     "passed": o.get("passed"),
                     "error": (o.get("error") or {}).get("class") if not measured else None,
                     **({"failure_class": o["failure_class"]} if o.get("failure_class") else {}),
                     **agent_fields(o)})
    return rows
