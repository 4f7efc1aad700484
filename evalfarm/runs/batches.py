"""A run's provider batches in its run store (blob ``batches``): each batch's id, provider, label, state,
counts and item keys, written when it is submitted and when it ends. ``status`` shows it; the record is
what ``cancel`` and ``resume`` work from."""
from __future__ import annotations

import json
import threading
from typing import Any

BLOB = "batches"


class BatchJournal:
    """The ``journal`` of a run's Batchers: keeps the records and writes them whole to the store."""

    def __init__(self, store: Any, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.records: dict[str, dict[str, Any]] = load(store, run_id)
        self._lock = threading.Lock()

    def __call__(self, event: str, record: dict[str, Any]) -> None:
        with self._lock:
            old = self.records.get(record["id"]) or {}
            keys = record.get("keys") if record.get("keys") is not None else old.get("keys")
            self.records[record["id"]] = {**old, **record, "keys": keys, "event": event}
            self.store.put_blob(self.run_id, BLOB, json.dumps(self.records).encode())


def load(store: Any, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's batch records (untrusted store content: anything not a record is dropped)."""
    raw = store.get_blob(run_id, BLOB)
    try:
        data = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)}


def lines(records: dict[str, dict[str, Any]]) -> list[str]:
    """One line per batch for ``status`` (the farm's format)."""
    from ..executors.celery.batches import lines as farm_lines

    return farm_lines(records)
