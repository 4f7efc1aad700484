"""What the tasks do, free of Celery: call a batch of items, judge them, finalize a run.

A batch skips items whose result is already stored (a redelivered task does
not pay twice) and records the rest under their keys. Items that need a judge
wait in the store's ``pending`` hash for a task on the judge queue. Whoever
records the last item claims the aggregate exactly once.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable

import structlog

from pathlib import Path

from ..adapters import Adapter
from ..cache import ResponseCache, SqliteCache
from ..engine import PROCESS_LOOP, Outcome, call_items, finish_outcome, judge_items
from ..judge import Judge
from ..plan import Item
from ..report import build_report
from ..runner import make_adapters, make_judge
from ..spec import EvalSpec
from .store import RunStore

log = structlog.get_logger("evalfarm.work")

Enqueue = Callable[[str, list[str]], None]


class RunContext:
    """A run's spec and its callable adapters/judge, rebuilt once per process."""

    def __init__(self, meta: dict[str, Any], store_url: str | None = None) -> None:
        self.meta = meta
        self.spec = EvalSpec.model_validate(meta["spec"])
        self._adapters: dict[str, Adapter] | None = None
        self._judge: Judge | None = None
        self.pass_score = self.spec.judge.pass_score if self.spec.judge else None
        self.cache: ResponseCache | None = None
        options = meta.get("options") or {}
        if options.get("cache"):
            if store_url:
                from .cache import RedisCache
                self.cache = RedisCache(store_url)
            else:
                self.cache = SqliteCache(Path(options.get("state_dir") or ".evalfarm") / "cache.sqlite")

    @property
    def adapters(self) -> dict[str, Adapter]:
        if self._adapters is None:
            self._adapters = make_adapters(self.spec)
        return self._adapters

    @property
    def judge(self) -> Judge | None:
        if self._judge is None and self.spec.judge is not None:
            self._judge = make_judge(self.spec)
        return self._judge


_CONTEXTS: "OrderedDict[str, RunContext]" = OrderedDict()


_CONTEXT_LOCK = threading.Lock()


def context_for(store: RunStore, run_id: str) -> RunContext | None:
    """Built once per process and run, even when several task threads ask at once."""
    ctx = _CONTEXTS.get(run_id)
    if ctx is not None:
        return ctx
    with _CONTEXT_LOCK:
        ctx = _CONTEXTS.get(run_id)
        if ctx is not None:
            return ctx
        meta = store.get_meta(run_id)
        if meta is None:
            return None
        ctx = _CONTEXTS[run_id] = RunContext(meta, getattr(store, "url", None))
        while len(_CONTEXTS) > 16:
            _CONTEXTS.popitem(last=False)
    return ctx


def _cancelled(store: RunStore, run_id: str) -> bool:
    return store.get_state(run_id) == "cancelled"


def _record(store: RunStore, ctx: RunContext, run_id: str, outcomes: list[Outcome],
            enqueue_aggregate: Callable[[str], None]) -> None:
    finished = store.record(run_id, [o.to_dict() for o in outcomes]) if outcomes \
        else store.counters(run_id).get("done", 0)
    if finished >= ctx.meta["total"] and store.claim(run_id, "aggregate"):
        enqueue_aggregate(run_id)


def _deadline(time_limit_s: float | None) -> float | None:
    return time.monotonic() + time_limit_s if time_limit_s else None


def execute_batch(store: RunStore, run_id: str, keys: list[str], max_in_flight: int,
                  enqueue_aggregate: Callable[[str], None], enqueue_judge: Enqueue | None = None,
                  time_limit_s: float | None = None) -> int:
    """Call the adapter for the batch's unfinished items; returns how many were called."""
    ctx = context_for(store, run_id)
    if ctx is None:
        log.warning("batch_for_unknown_run", run_id=run_id)
        return 0
    if _cancelled(store, run_id):
        return 0
    done = store.done_keys(run_id, keys)
    open_keys = [k for k in keys if k not in done]
    pending = {o["key"] for o in store.get_pending(run_id, open_keys) if o}
    todo = [k for k in open_keys if k not in pending]
    items = [Item.from_dict(json.loads(raw)) for raw in store.get_items(run_id, todo) if raw]
    deadline = _deadline(time_limit_s)
    outcomes = PROCESS_LOOP.run(lambda: call_items(items, ctx.adapters, max_in_flight, ctx.cache, deadline)) \
        if items else []
    needs_judge = [o for o in outcomes if o.error is None] if ctx.spec.judge else []
    judged_ids = {id(o) for o in needs_judge}
    final = [finish_outcome(o, ctx.pass_score) for o in outcomes if id(o) not in judged_ids]
    if needs_judge or pending:
        store.put_pending(run_id, [o.to_dict() for o in needs_judge])
        judge_keys = [o.key for o in needs_judge] + sorted(pending)
        if enqueue_judge is None:
            raise RuntimeError("this run needs a judge queue")
        enqueue_judge(run_id, judge_keys)
    _record(store, ctx, run_id, final, enqueue_aggregate)
    return len(outcomes)


def execute_judge(store: RunStore, run_id: str, keys: list[str], max_in_flight: int,
                  enqueue_aggregate: Callable[[str], None], time_limit_s: float | None = None) -> int:
    """Judge called-but-unjudged items and record them; returns how many were judged."""
    ctx = context_for(store, run_id)
    if ctx is None or _cancelled(store, run_id):
        return 0
    done = store.done_keys(run_id, keys)
    open_keys = [k for k in keys if k not in done]
    partial = {o["key"]: Outcome.from_dict(o) for o in store.get_pending(run_id, open_keys) if o}
    raws = store.get_items(run_id, list(partial))
    pairs = [(Item.from_dict(json.loads(raw)), partial[k]) for k, raw in zip(partial, raws) if raw]
    deadline = _deadline(time_limit_s)
    judged = PROCESS_LOOP.run(lambda: judge_items(pairs, ctx.judge, ctx.pass_score, max_in_flight, deadline)) \
        if pairs else []
    _record(store, ctx, run_id, judged, enqueue_aggregate)
    return len(judged)


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
    from ..report import render_markdown

    raw = report_bytes(report)
    # the coordinator prints and gates from the summary and writes these bytes as they are,
    # so it never has to parse 100,000 outcomes
    summary = {k: v for k, v in report.to_dict().items() if k != "outcomes"}
    store.put_blob(run_id, "summary", json.dumps(summary).encode())
    store.put_blob(run_id, "markdown", render_markdown(report.to_dict()).encode())
    store.put_report(run_id, raw)
    store.update_meta(run_id, state="done", finished_at=report.finished_at)
    store.expire_run(run_id, int(os.environ.get("EVALFARM_RUN_TTL_S") or 7 * 86400))
    return raw
