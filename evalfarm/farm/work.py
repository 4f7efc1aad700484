"""What the tasks do, free of Celery: run a batch of items, finalize a run.

A batch skips items whose result is already stored (a redelivered task does
not pay twice) and records the rest under their keys. Whoever records the last
item claims the aggregate exactly once.
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable

import structlog

from ..adapters import Adapter
from ..engine import PROCESS_LOOP, run_items
from ..judge import Judge
from ..plan import Item
from ..report import build_report
from ..runner import make_adapters, make_judge
from ..spec import EvalSpec
from .store import RunStore

log = structlog.get_logger("evalfarm.work")


class RunContext:
    """A run's spec and its callable adapters/judge, rebuilt once per process."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta
        self.spec = EvalSpec.model_validate(meta["spec"])
        self.adapters: dict[str, Adapter] = make_adapters(self.spec)
        self.judge: Judge | None = make_judge(self.spec)


_CONTEXTS: "OrderedDict[str, RunContext]" = OrderedDict()


def context_for(store: RunStore, run_id: str) -> RunContext | None:
    ctx = _CONTEXTS.get(run_id)
    if ctx is None:
        meta = store.get_meta(run_id)
        if meta is None:
            return None
        ctx = _CONTEXTS[run_id] = RunContext(meta)
        while len(_CONTEXTS) > 16:
            _CONTEXTS.popitem(last=False)
    return ctx


def execute_batch(store: RunStore, run_id: str, keys: list[str], max_in_flight: int,
                  enqueue_aggregate: Callable[[str], None]) -> int:
    """Run the batch's unfinished items; returns how many ran."""
    ctx = context_for(store, run_id)
    if ctx is None:
        log.warning("batch_for_unknown_run", run_id=run_id)
        return 0
    if (store.get_meta(run_id) or {}).get("state") == "cancelled":
        return 0
    done = store.done_keys(run_id, keys)
    todo = [k for k in keys if k not in done]
    ran = 0
    if todo:
        items = [Item.from_dict(json.loads(raw)) for raw in store.get_items(run_id, todo) if raw]
        outcomes = PROCESS_LOOP.run(lambda: run_items(items, ctx.adapters, ctx.judge, max_in_flight))
        finished = store.record(run_id, [o.to_dict() for o in outcomes])
        ran = len(outcomes)
    else:
        finished = store.counters(run_id).get("done", 0)
    if finished >= ctx.meta["total"] and store.claim(run_id, "aggregate"):
        enqueue_aggregate(run_id)
    return ran


def finalize(store: RunStore, run_id: str) -> bytes | None:
    """Aggregate every stored outcome into the report; store it. None if incomplete."""
    meta = store.get_meta(run_id)
    if meta is None:
        return None
    done = store.counters(run_id).get("done", 0)
    if done < meta["total"]:
        store.release(run_id, "aggregate")
        log.warning("aggregate_incomplete", run_id=run_id, done=done, total=meta["total"])
        return None
    spec = EvalSpec.model_validate(meta["spec"])
    finished = datetime.now(timezone.utc)
    started = datetime.fromisoformat(meta["started_at"])
    report = build_report(run_id=run_id, spec=spec, spec_hash=meta["spec_hash"], mode=meta["mode"],
                          trials=meta["trials"], outcomes=store.iter_outcomes(run_id),
                          started_at=meta["started_at"],
                          finished_at=finished.isoformat(timespec="milliseconds"),
                          duration_s=(finished - started).total_seconds())
    from ..artifacts import report_bytes

    raw = report_bytes(report)
    store.put_report(run_id, raw)
    store.update_meta(run_id, state="done", finished_at=report.finished_at)
    return raw


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def monotonic() -> float:
    return time.monotonic()
