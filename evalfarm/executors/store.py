"""The run store contract, and ``MemoryStore``, its in-process implementation.

A run store holds a run's plan (items in plan order), each item's result under its key,
counters, the judge backlog and the report. Results are written under the item key, so a
redelivered or duplicated task overwrites instead of double counting; counters move only
when a key is new (or its error/cost changed). ``MemoryStore`` is a full peer of the Redis
store (``backends.celery.store``): same contract, same semantics, tested the same way.

The report is kept as a head (everything but the outcomes, written last: its presence
means the report is complete) and a body (the outcome lines, appended in plan order), so
neither the aggregate nor the coordinator ever holds a 100,000-item report whole.
"""
from __future__ import annotations

import json
import os
import secrets
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator

from ..core.report.framing import PROMPTS_OPEN, REPORT_CLOSE, SECTIONS
from ..engine.budget import NUSD

COST_SCALE = NUSD  # cost counters are integer nano-dollars: INCRBY is exact, floats are not
SPENT_FIELD = "spent_nusd"  # a budgeted farm run's spend counter (every call, as it returns) in its counters


def cost_meta(outcome: dict[str, Any]) -> tuple[int, int]:
    """(errored, spend in nano-dollars): spend counts the model and the judge."""
    spend = (outcome.get("cost_usd") or 0.0) + (outcome.get("judge_cost_usd") or 0.0)
    return (1 if outcome.get("error") else 0, int(round(spend * COST_SCALE)))


class RunStore(ABC):
    @abstractmethod
    def ping(self) -> None:
        """Raise when the store cannot be reached."""

    @abstractmethod
    def create_run(self, run_id: str, meta: dict[str, Any]) -> None: ...

    @abstractmethod
    def add_items(self, run_id: str, items: list[tuple[str, str]], prompts: list[str] = ()) -> None:
        """Append (key, item JSON) pairs to the plan, in plan order, and the new prompts' JSON."""

    @abstractmethod
    def iter_prompts(self, run_id: str) -> Iterator[str]:
        """The plan's prompts (JSON text), each once, in plan order."""

    @abstractmethod
    def persist_plan(self, run_id: str) -> None:
        """The plan is complete: its keys stop expiring (a plan being stored expires unless its
        coordinator keeps writing it, so a dead coordinator leaves nothing behind for good)."""

    @abstractmethod
    def discard_plan(self, run_id: str) -> int:
        """Delete a run's plan and results (not its meta and state); returns how many items the
        plan held. Works on a full Redis (deleting frees memory)."""

    @abstractmethod
    def get_meta(self, run_id: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def update_meta(self, run_id: str, **fields: Any) -> None: ...

    @abstractmethod
    def get_state(self, run_id: str) -> str | None:
        """The run's state alone: read per batch and per progress poll, so it never parses the meta."""

    @abstractmethod
    def transition(self, run_id: str, to: str, allowed_from: tuple[str, ...] | None = None,
                   **fields: Any) -> tuple[bool, str | None]:
        """Compare-and-set the run's state: move to ``to`` (and set ``fields`` in the meta) only if
        the state is one of ``allowed_from`` (any, when None), so a late writer can never undo a
        cancel. Returns (applied, the state found); the meta keeps it as ``previous_state``."""

    @abstractmethod
    def acquire_lock(self, run_id: str, what: str, ttl_s: float) -> str | None:
        """A token if this caller now holds the run's ``what`` lock (it expires after ``ttl_s``
        unless refreshed), None if someone else holds it."""

    @abstractmethod
    def refresh_lock(self, run_id: str, what: str, token: str, ttl_s: float) -> bool:
        """Extend a held lock (or take it again if it expired); False if another holder has it."""

    @abstractmethod
    def release_lock(self, run_id: str, what: str, token: str) -> None:
        """Release the lock if ``token`` still holds it."""

    @abstractmethod
    def get_items(self, run_id: str, keys: list[str]) -> list[str | None]: ...

    @abstractmethod
    def iter_item_keys(self, run_id: str) -> Iterator[str]:
        """Every planned item key, in plan order."""

    @abstractmethod
    def done_keys(self, run_id: str, keys: list[str]) -> set[str]: ...

    @abstractmethod
    def get_results(self, run_id: str, keys: list[str]) -> list[str | None]:
        """Stored outcomes (JSON text) of ``keys``; None where an item has none yet."""

    @abstractmethod
    def record(self, run_id: str, outcomes: list[dict[str, Any]]) -> int:
        """Store outcomes by key; returns the number of distinct finished items, or -1 (nothing
        written) when the run is gone from the store: a late result must not recreate its keys."""

    @abstractmethod
    def counters(self, run_id: str) -> dict[str, int]: ...

    @abstractmethod
    def note_start(self, run_id: str, key: str) -> int:
        """One more start of an item's spawn task; returns how many there have been. A start that finds
        an earlier one without a result means the worker running it died (executors/celery/work.py)."""

    @abstractmethod
    def unnote_start(self, run_id: str, key: str) -> None:
        """Take back one start of an item: a cancel stopped it, its worker did not die."""

    @abstractmethod
    def put_pending(self, run_id: str, outcomes: list[dict[str, Any]]) -> None:
        """Outcomes called but not yet judged (they wait for the judge queue)."""

    @abstractmethod
    def get_pending(self, run_id: str, keys: list[str]) -> list[dict[str, Any] | None]: ...

    @abstractmethod
    def pending_among(self, run_id: str, keys: list[str]) -> set[str]:
        """Which of ``keys`` await the judge (membership only: no bodies fetched)."""

    def batch_view(self, run_id: str, keys: list[str]) -> tuple[str | None, set[str], set[str], dict[str, str]]:
        """What a batch needs before it calls anything: (the run's state, the keys done, the keys awaiting
        the judge, {key: item JSON} of the rest). A store may answer in one round trip (Redis: one script)."""
        done = self.done_keys(run_id, keys)
        open_keys = [k for k in keys if k not in done]
        pending = self.pending_among(run_id, open_keys)
        todo = [k for k in open_keys if k not in pending]
        return (self.get_state(run_id), done, pending,
                {k: raw for k, raw in zip(todo, self.get_items(run_id, todo)) if raw is not None})

    @abstractmethod
    def pending_keys(self, run_id: str) -> list[str]: ...

    @abstractmethod
    def pending_count(self, run_id: str) -> int: ...

    @abstractmethod
    def claim(self, run_id: str, what: str) -> bool:
        """True exactly once per (run, what): guards enqueueing the aggregate."""

    @abstractmethod
    def release(self, run_id: str, what: str) -> None: ...

    @abstractmethod
    def clear_report(self, run_id: str) -> None:
        """Forget a report under construction (an aggregate that runs again starts over)."""

    @abstractmethod
    def append_report(self, run_id: str, data: bytes, section: str = "outcomes") -> None:
        """Append lines to a section of the report's body (``outcomes`` or ``prompts``)."""

    @abstractmethod
    def put_report_head(self, run_id: str, head: bytes) -> None:
        """Write the report's head: from now on the report exists."""

    @abstractmethod
    def report_size(self, run_id: str) -> int:
        """The report file's size in bytes; 0 while there is no (complete) report."""

    @abstractmethod
    def iter_report(self, run_id: str) -> Iterator[bytes]:
        """The report file's bytes in chunks."""

    @abstractmethod
    def runs(self) -> list[str]: ...

    @abstractmethod
    def put_blob(self, run_id: str, name: str, data: bytes) -> None: ...

    @abstractmethod
    def get_blob(self, run_id: str, name: str) -> bytes | None: ...

    @abstractmethod
    def expire_run(self, run_id: str, ttl_s: int) -> None:
        """A finished run's keys expire (its report is on the user's disk by then)."""

    def mark_aggregating(self, run_id: str, ttl_s: int = 30) -> None:
        """The aggregate is at work on the run (renewed as it goes): nobody sends another meanwhile."""

    def aggregating(self, run_id: str) -> bool:
        return False

    def get_report(self, run_id: str) -> bytes | None:
        return b"".join(self.iter_report(run_id)) if self.report_size(run_id) else None


class MemoryStore(RunStore):
    """The run store in this process's memory (the in-process backend)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta: dict[str, dict[str, Any]] = {}
        self._items: dict[str, dict[str, str]] = {}
        self._results: dict[str, dict[str, str]] = {}
        self._rmeta: dict[str, dict[str, tuple[int, int]]] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._pending: dict[str, dict[str, str]] = {}
        self._claims: set[tuple[str, str]] = set()
        self._prompts: dict[str, list[str]] = {}
        self._heads: dict[str, bytes] = {}
        self._bodies: dict[tuple[str, str], list[bytes]] = {}
        self._blobs: dict[tuple[str, str], bytes] = {}
        self._locks: dict[tuple[str, str], tuple[str, float]] = {}
        self._starts: dict[tuple[str, str], int] = {}

    def note_start(self, run_id: str, key: str) -> int:
        with self._lock:
            n = self._starts[(run_id, key)] = self._starts.get((run_id, key), 0) + 1
            return n

    def unnote_start(self, run_id: str, key: str) -> None:
        with self._lock:
            self._starts[(run_id, key)] = max(0, self._starts.get((run_id, key), 0) - 1)

    def ping(self) -> None:
        pass

    def create_run(self, run_id: str, meta: dict[str, Any]) -> None:
        with self._lock:
            self._meta[run_id] = dict(meta)
            for table in (self._items, self._results, self._rmeta, self._counts, self._pending):
                table.setdefault(run_id, {})

    # what is kept of an item, a result, a prompt or a report chunk: the value itself here; an offset
    # into a spool file in SpoolStore (a million-item run in this process)
    def _hold(self, value: Any) -> Any:
        return value

    def _text(self, held: Any) -> str:
        return held

    def _bytes(self, held: Any) -> bytes:
        return held

    def _size(self, held: Any) -> int:
        return len(held)

    def add_items(self, run_id: str, items: list[tuple[str, str]], prompts: list[str] = ()) -> None:
        with self._lock:
            self._items[run_id].update((k, self._hold(v)) for k, v in items)  # a dict keeps insertion (plan) order
            self._prompts.setdefault(run_id, []).extend(self._hold(p) for p in prompts)

    def iter_prompts(self, run_id: str) -> Iterator[str]:
        return map(self._text, list(self._prompts.get(run_id, [])))

    def persist_plan(self, run_id: str) -> None:
        pass  # nothing expires in this process

    def discard_plan(self, run_id: str) -> int:
        with self._lock:
            stored = len(self._items.get(run_id, {}))
            for table in (self._items, self._results, self._rmeta, self._counts, self._pending):
                table[run_id] = {}
            self._prompts.pop(run_id, None)
            return stored

    def get_meta(self, run_id: str) -> dict[str, Any] | None:
        meta = self._meta.get(run_id)
        return dict(meta) if meta is not None else None

    def update_meta(self, run_id: str, **fields: Any) -> None:
        with self._lock:
            self._meta[run_id].update(fields)

    def get_state(self, run_id: str) -> str | None:
        return (self._meta.get(run_id) or {}).get("state")

    def transition(self, run_id: str, to: str, allowed_from: tuple[str, ...] | None = None,
                   **fields: Any) -> tuple[bool, str | None]:
        with self._lock:
            meta = self._meta.get(run_id)
            current = meta.get("state") if meta is not None else None
            if meta is None or (allowed_from is not None and current not in allowed_from):
                return False, current
            meta.update(fields, state=to, previous_state=current)
            return True, current

    def acquire_lock(self, run_id: str, what: str, ttl_s: float) -> str | None:
        with self._lock:
            held = self._locks.get((run_id, what))
            if held is not None and held[1] > time.monotonic():
                return None
            token = secrets.token_hex(8)
            self._locks[(run_id, what)] = (token, time.monotonic() + ttl_s)
            return token

    def refresh_lock(self, run_id: str, what: str, token: str, ttl_s: float) -> bool:
        with self._lock:
            held = self._locks.get((run_id, what))
            if held is not None and held[0] != token and held[1] > time.monotonic():
                return False
            self._locks[(run_id, what)] = (token, time.monotonic() + ttl_s)
            return True

    def release_lock(self, run_id: str, what: str, token: str) -> None:
        with self._lock:
            if (self._locks.get((run_id, what)) or ("",))[0] == token:
                del self._locks[(run_id, what)]

    def get_items(self, run_id: str, keys: list[str]) -> list[str | None]:
        items = self._items.get(run_id, {})
        return [self._text(items[k]) if k in items else None for k in keys]

    def iter_item_keys(self, run_id: str) -> Iterator[str]:
        return iter(list(self._items.get(run_id, {})))

    def done_keys(self, run_id: str, keys: list[str]) -> set[str]:
        results = self._results.get(run_id, {})
        return {k for k in keys if k in results}

    def get_results(self, run_id: str, keys: list[str]) -> list[str | None]:
        results = self._results.get(run_id, {})
        return [self._text(results[k]) if k in results else None for k in keys]

    def record(self, run_id: str, outcomes: list[dict[str, Any]]) -> int:
        with self._lock:
            if run_id not in self._meta:
                return -1
            results, rmeta, counts = self._results[run_id], self._rmeta[run_id], self._counts[run_id]
            pending = self._pending[run_id]
            for o in outcomes:
                err, cost = cost_meta(o)
                old = rmeta.get(o["key"])
                a = o["adapter"]
                counts["executed"] = counts.get("executed", 0) + 1
                if old is None:
                    for f in ("done", f"done:{a}"):
                        counts[f] = counts.get(f, 0) + 1
                    old = (0, 0)
                for f in ("errors", f"errors:{a}"):
                    counts[f] = counts.get(f, 0) + err - old[0]
                for f in ("cost_nusd", f"cost_nusd:{a}"):
                    counts[f] = counts.get(f, 0) + cost - old[1]
                results[o["key"]] = self._hold(json.dumps(o))
                rmeta[o["key"]] = (err, cost)
                pending.pop(o["key"], None)
            return len(results)

    def counters(self, run_id: str) -> dict[str, int]:
        return dict(self._counts.get(run_id, {}))

    def put_pending(self, run_id: str, outcomes: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pending[run_id].update({o["key"]: json.dumps(o) for o in outcomes})

    def get_pending(self, run_id: str, keys: list[str]) -> list[dict[str, Any] | None]:
        pending = self._pending.get(run_id, {})
        return [json.loads(pending[k]) if k in pending else None for k in keys]

    def pending_among(self, run_id: str, keys: list[str]) -> set[str]:
        pending = self._pending.get(run_id, {})
        return {k for k in keys if k in pending}

    def pending_keys(self, run_id: str) -> list[str]:
        return list(self._pending.get(run_id, {}))

    def pending_count(self, run_id: str) -> int:
        return len(self._pending.get(run_id, {}))

    def claim(self, run_id: str, what: str) -> bool:
        with self._lock:
            if (run_id, what) in self._claims:
                return False
            self._claims.add((run_id, what))
            return True

    def release(self, run_id: str, what: str) -> None:
        with self._lock:
            self._claims.discard((run_id, what))

    def clear_report(self, run_id: str) -> None:
        self._heads.pop(run_id, None)
        for section in SECTIONS:
            self._bodies[(run_id, section)] = []

    def append_report(self, run_id: str, data: bytes, section: str = "outcomes") -> None:
        self._bodies.setdefault((run_id, section), []).append(self._hold(data))

    def put_report_head(self, run_id: str, head: bytes) -> None:
        self._heads[run_id] = head

    def report_size(self, run_id: str) -> int:
        head = self._heads.get(run_id)
        if head is None:
            return 0
        body = sum(self._size(b) for section in SECTIONS for b in self._bodies.get((run_id, section), []))
        return len(head) + body + len(PROMPTS_OPEN) + len(REPORT_CLOSE)

    def iter_report(self, run_id: str) -> Iterator[bytes]:
        if run_id in self._heads:
            yield self._heads[run_id]
            yield from map(self._bytes, list(self._bodies.get((run_id, "outcomes"), [])))
            yield PROMPTS_OPEN
            yield from map(self._bytes, list(self._bodies.get((run_id, "prompts"), [])))
            yield REPORT_CLOSE

    def runs(self) -> list[str]:
        return sorted(self._meta, reverse=True)

    def put_blob(self, run_id: str, name: str, data: bytes) -> None:
        self._blobs[(run_id, name)] = data

    def get_blob(self, run_id: str, name: str) -> bytes | None:
        return self._blobs.get((run_id, name))

    def expire_run(self, run_id: str, ttl_s: int) -> None:
        pass  # lives as long as its process


SPOOL_AFTER = 64 << 20  # kept in memory before the spool file: a run of a few thousand items never touches it
_SIZE = (1 << 40) - 1  # a held value: its offset above 40 bits, its size (under a terabyte) below


class SpoolStore(MemoryStore):
    """``MemoryStore`` whose items, results, prompts and report chunks go to a private temporary file
    once the run has kept ``SPOOL_AFTER`` bytes of them in memory (each then held as one int: where it
    starts and how long it is), so a million-item run holds its keys and counters, not its outputs three
    times over (plan, result, report), while a run of a few thousand items never pays for the file
    (writing and reading one back costs ~7 us a value against ~0.2 in memory)."""

    def __init__(self, spool_after: int | None = None) -> None:
        from ..envvars import env_int

        super().__init__()
        if spool_after is None:
            spool_after = env_int("EVALFARM_SPOOL_AFTER_MB", SPOOL_AFTER >> 20, 0, 1 << 20) << 20
        self._spool_after = spool_after
        self._kept = 0  # bytes kept in memory so far
        self._spool: Any = None  # the file, opened at the first value past the limit
        self._end = 0  # bytes written to it (some may still be in its buffer)
        self._synced = 0  # bytes that a pread can see
        self._spool_lock = threading.Lock()

    def _hold(self, value: Any) -> Any:
        if self._kept < self._spool_after:
            self._kept += len(value)
            return value
        data = value.encode("utf-8") if isinstance(value, str) else value
        with self._spool_lock:
            if self._spool is None:
                import tempfile

                self._spool = tempfile.TemporaryFile(prefix="evalfarm-run-", buffering=1 << 20)
            at = self._end
            self._spool.write(data)
            self._end += len(data)
        return (at << 40 | len(data)) if isinstance(value, str) else -(at << 40 | len(data)) - 1

    def _read(self, held: int) -> bytes:
        at, size = held >> 40, held & _SIZE
        with self._spool_lock:
            if at + size > self._synced:
                self._spool.flush()
                self._synced = self._end
        data = os.pread(self._spool.fileno(), size, at)
        if len(data) != size:
            raise OSError(f"the run's spool file ended early ({len(data)} of {size} bytes)")
        return data

    def _text(self, held: Any) -> str:
        return self._read(held).decode("utf-8") if isinstance(held, int) else held

    def _bytes(self, held: Any) -> bytes:
        return self._read(-held - 1) if isinstance(held, int) else held

    def _size(self, held: Any) -> int:
        if not isinstance(held, int):
            return len(held)
        return (-held - 1) & _SIZE if held < 0 else held & _SIZE

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


def batched(iterable: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for x in iterable:
        batch.append(x)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass
class Progress:
    """Where a run stands, from the store's counters (the same for both backends)."""

    run_id: str
    total: int
    done: int
    errors: int
    cost_usd: float
    per_adapter: dict[str, tuple[int, int]]  # adapter -> (done, errors)
    elapsed_s: float  # since the run started (not since this process attached)
    state: str
    pending_judge: int = 0
    executed: int = 0
    cost_per_adapter: dict[str, float] | None = None  # model + judge spend so far
    # results the run store lost (Redis restored from an older snapshot) that have not run again yet:
    # ``done`` is the most results the store held, so it never goes down; done - lost are stored now
    lost: int = 0
    lost_seen: int = 0  # the most results the store was found to have lost, re-run ones included

    @property
    def stored(self) -> int:
        """Items whose results the store holds now (what completes the run)."""
        return self.done - self.lost


def progress_of(store: RunStore, run_id: str, meta: dict[str, Any]) -> Progress:
    """Counters, state and judge backlog; ``meta`` is the run's (static) meta, read once per run."""
    c = store.counters(run_id)
    adapters = meta.get("adapters", [])
    try:
        since = (datetime.now(timezone.utc) - datetime.fromisoformat(meta["started_at"])).total_seconds()
    except (KeyError, ValueError, TypeError):
        since = 0.0
    stored = c.get("done", 0)
    done = max(stored, c.get("done_seen", 0))
    return Progress(run_id=run_id, total=meta["total"], done=done, lost=done - stored,
                    lost_seen=max(c.get("lost_seen", 0), done - stored), errors=c.get("errors", 0),
                    cost_usd=c.get("cost_nusd", 0) / COST_SCALE,
                    per_adapter={a: (c.get(f"done:{a}", 0), c.get(f"errors:{a}", 0)) for a in adapters},
                    elapsed_s=max(since, 0.0), state=store.get_state(run_id) or "?",
                    pending_judge=store.pending_count(run_id), executed=c.get("executed", 0),
                    cost_per_adapter={a: c.get(f"cost_nusd:{a}", 0) / COST_SCALE for a in adapters})
