"""What the farm's tasks do, free of Celery: call a batch of items, judge them.

A batch skips items whose result is already stored (a redelivered task does not pay
twice) and records the rest under their keys. Items that need a judge wait in the
store's ``pending`` hash for a task on the judge queue. Whoever records the last item
claims the aggregate exactly once. Each worker process runs one event loop
(``LoopThread``) shared by its task threads, so pooled HTTP clients and the per-process
cap on calls in flight are shared by every batch it runs.
"""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

from ...core import failure
from ...core.outcome import Outcome
from ...core.plan import Item
from ...engine import build_engine
from ...errors import InfrastructureError
from ...logs import get_logger
from ...providers.limits import endpoint_id
from ...engine.cache import ResponseCache, SqliteCache
from ...engine.items import Engine, bounded, error_of, within
from ..finalize import spec_of
from ..store import RunStore
from .budget import spend_guard
from .cache import RedisCache
from .cancel_watch import CANCEL_WATCH
from .limits import run_slots
from .runners import run_in_lanes

log = get_logger("evalfarm.work")

T = TypeVar("T")
Enqueue = Callable[[str, list[str]], None]


class LoopThread:
    """A long-lived event loop in a daemon thread; ``run`` blocks the calling task thread until done."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._pid: int | None = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # a forked child needs its own loop
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="evalfarm-loop", daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await factory()

        return asyncio.run_coroutine_threadsafe(call(), self._ensure()).result()


WORKER_LOOP = LoopThread()


class RunContext:
    """A run's spec and engine, built once per process and run."""

    def __init__(self, meta: dict[str, Any], store_url: str | None = None, blob_dir: str | None = None) -> None:
        self.meta = meta
        self.blob_dir = blob_dir
        self.spec = spec_of(meta)
        self.options = meta.get("options") or {}
        self._engine: Engine | None = None
        self._lanes: dict[str | None, str] | None = None
        self.store_url = store_url
        cap = self.options.get("max_in_flight")  # run --concurrency N: N calls in flight across the fleet
        self.slots = run_slots(store_url, meta["run_id"], int(cap)) if cap and store_url else None

    def in_flight(self, worker_cap: int) -> int:
        cap = self.options.get("max_in_flight")
        return min(worker_cap, int(cap)) if cap else worker_cap

    async def held(self, coro: Awaitable[T]) -> T:
        """Await ``coro`` holding one of the run's fleet-wide slots (when the run has a cap)."""
        if self.slots is None:
            return await coro
        async with self.slots.fleet_slot():
            return await coro

    def _cache(self) -> ResponseCache | None:
        if not self.options.get("cache"):
            return None
        if self.store_url:
            return RedisCache(self.store_url)
        return SqliteCache(Path(self.options.get("state_dir") or ".evalfarm") / "cache.sqlite")

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            engine = build_engine(self.spec, cache=self._cache())
            if self.blob_dir:  # agent adapters write patches and check logs to this worker's blob directory
                for adapter in engine.adapters.values():
                    if hasattr(adapter, "use_blob_dir"):
                        adapter.use_blob_dir(Path(self.blob_dir))
            engine.budget = spend_guard(self.store_url, self.meta)  # a budgeted run's fleet-wide spend
            self._engine = engine
        return self._engine

    def lanes(self, adapters: list[str | None]) -> list[str]:
        """The runners' lane of each call (``lane``) by its adapter id, None for the judge: the
        endpoints are worked out once per run."""
        if self._lanes is None:
            engine = self.engine
            self._lanes = {a: lane(adapter) for a, adapter in engine.adapters.items()}
            self._lanes[None] = lane(engine.judge_)
        return [self._lanes.get(a, "") for a in adapters]


_CONTEXTS: "OrderedDict[str, RunContext]" = OrderedDict()
_CONTEXT_LOCK = threading.Lock()


def context_for(store: RunStore, run_id: str, store_url: str | None, blob_dir: str | None = None) -> RunContext | None:
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
        ctx = _CONTEXTS[run_id] = RunContext(meta, store_url, blob_dir)
        while len(_CONTEXTS) > 16:
            _CONTEXTS.popitem(last=False)
    return ctx


STOPPED = ("cancelled", "failed")  # a batch of a run in either state is dropped; ``resume`` dispatches it again


def _known_context(store, run_id: str, store_url: str | None, blob_dir: str | None):
    """The run's context for a batch, or None (logged) when this store does not know the run."""
    ctx = context_for(store, run_id, store_url, blob_dir)
    if ctx is None:
        log.warning("batch_for_unknown_run", run_id=run_id)
    return ctx


def _live_context(store, run_id: str, store_url: str | None, blob_dir: str | None):
    """The run's context for a batch, or None when there is nothing to do: the run is unknown to this
    store (logged) or cancelled."""
    ctx = _known_context(store, run_id, store_url, blob_dir)
    return None if ctx is None or _cancelled(store, run_id) else ctx


def _cancelled(store: RunStore, run_id: str) -> bool:
    """Cancelled, or stopped (failed: e.g. its spend records were lost): a batch is dropped, and
    ``resume`` dispatches its items again."""
    return store.get_state(run_id) in STOPPED


def _record(store: RunStore, ctx: RunContext, run_id: str, outcomes: list[Outcome],
            enqueue_aggregate: Callable[[str], None]) -> None:
    finished = store.record(run_id, [o.to_dict() for o in outcomes]) if outcomes \
        else store.counters(run_id).get("done", 0)
    if finished < 0:  # the run's keys are gone (Redis lost its data): nothing to record into
        log.warning("run_vanished", run_id=run_id, dropped=len(outcomes))
        return
    if finished >= ctx.meta["total"] and store.claim(run_id, "aggregate"):
        try:
            enqueue_aggregate(run_id)
        except BaseException:  # the broker refused it: let the retried batch (or wait's kick) claim again
            store.release(run_id, "aggregate")
            raise


class _Progressive:
    """A batch's items recorded as they finish, a few at a time, not all at the batch's end: the run's
    progress (and the live bar) moves item by item, and a batch cut short keeps what it finished."""

    EVERY_N, EVERY_S = 64, 0.25

    def __init__(self, store: RunStore, ctx: "RunContext", run_id: str,
                 enqueue_aggregate: Callable[[str], None]) -> None:
        self.store, self.ctx, self.run_id, self.enqueue_aggregate = store, ctx, run_id, enqueue_aggregate
        self.buffer: list[Outcome] = []
        self.last = time.monotonic()
        self.recorded = 0

    async def add(self, outcome: Outcome) -> None:
        self.buffer.append(outcome)
        if len(self.buffer) >= self.EVERY_N or time.monotonic() - self.last >= self.EVERY_S:
            await self.flush()

    async def flush(self) -> None:
        if not self.buffer:
            return
        batch, self.buffer, self.last = self.buffer, [], time.monotonic()
        self.recorded += len(batch)
        await asyncio.to_thread(_record, self.store, self.ctx, self.run_id, batch, self.enqueue_aggregate)


async def _kept(coro: Awaitable[Outcome]) -> Outcome | InfrastructureError:
    """An infrastructure failure (limiter, cache) is returned, not raised: the batch's other items
    finish and are recorded, and the batch runs again for the rest (their results are not answers)."""
    try:
        return await coro
    except InfrastructureError as exc:
        return exc


def _split(results: list[Outcome | InfrastructureError]) -> tuple[list[Outcome], list[InfrastructureError]]:
    return [r for r in results if isinstance(r, Outcome)], [r for r in results if isinstance(r, InfrastructureError)]


def _raise_for(failed: list[InfrastructureError], total: int) -> None:
    if failed:
        raise InfrastructureError(f"{len(failed)} of {total} items of the batch hit an infrastructure error "
                                  f"(first: {failed[0]}); they stay unfinished and the batch runs again")


def _deadline(time_limit_s: float | None) -> float | None:
    return time.monotonic() + time_limit_s if time_limit_s else None


class WorkerDied(Exception):
    """The worker running an agent task died (SIGKILL, OOM, the host lost) before it recorded a result."""


def note_starts(store: RunStore, run_id: str, keys: list[str]) -> dict[str, int]:
    """A spawn task counts its start of each unfinished item, once per delivery (not again when its
    batch is retried after an infrastructure error); returns the count per key."""
    done = store.done_keys(run_id, keys)
    return {k: store.note_start(run_id, k) for k in keys if k not in done}


def _worker_deaths(starts: dict[str, int], items: list[Item], engine: Engine) -> tuple[
        list[Item], list[Outcome], dict[str, int]]:
    """A spawn task's start of an item that finds earlier starts without a result follows that many dead
    workers. Such an item runs again up to ``failure.infra_retries()`` times (the stated
    retries of an infra failure: the redelivery went to whichever worker took it, another one when there
    is one); past that it is recorded ``infra_failed`` (error ``WorkerDied``) without running, never as
    the agent's failure. Returns the items to run, the outcomes of those given up, deaths per key."""
    run, given_up, deaths = [], [], {}
    for item in items:
        died = starts.get(item.key, 1) - 1
        if died <= 0:
            run.append(item)
            continue
        deaths[item.key] = died
        if died <= failure.infra_retries():
            run.append(item)
            continue
        out = Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
        out.error = error_of(WorkerDied(f"the worker running this agent task died {died} times before it finished "
                                        f"(killed or lost); not run again after {died - 1} retries"), "adapter")
        spec = getattr(engine.adapters.get(item.adapter), "spec", None)
        out.agent = {"agent": getattr(spec, "agent", None), "infra": True, "worker_deaths": died, "attempts": died}
        given_up.append(engine.decide(out))
    return run, given_up, deaths


def lane(part: Any) -> str:
    """The runners' lane of an adapter or a judge: its provider endpoint and key (``runners.py``)."""
    where = getattr(part, "endpoint", None) or getattr(part, "spec", None)
    base = getattr(where, "base_url", None)
    return endpoint_id(base, getattr(where, "api_key_env", None) or "") if isinstance(base, str) else ""


async def _each(limit: int, worker_cap: int, calls: list[Callable[[], Awaitable[T]]], lanes: list[str]) -> list[T]:
    """Await every call, at most ``limit`` at once; results in input order. At the worker's own cap (a run
    without a lower ``--concurrency``) the calls go to the process's runners, shared by every batch."""
    if limit == worker_cap and len(calls) > 1:
        return await run_in_lanes(limit, calls, lanes)
    return await bounded(limit, calls)


async def _unless_stopped(limit: int, worker_cap: int, calls: list[Callable[[], Awaitable[T]]], lanes: list[str],
                          watch: Callable[[Callable[[], None]], Any] | None) -> tuple[list[T], list[int]]:
    """Await every call, at most ``limit`` at once (results in input order), unless ``watch`` calls the
    stop it is given first: then the calls still running are cancelled (an agent's sandbox is killed by
    its adapter) and only the finished ones are returned, with the indices of those stopped."""
    if watch is None:
        return await _each(limit, worker_cap, calls, lanes), []
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    sem = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await call()

    tasks = [asyncio.ensure_future(one(c)) for c in calls]
    everything = asyncio.gather(*tasks)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        with watch(lambda: loop.call_soon_threadsafe(stop.set)):
            await asyncio.wait([everything, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if everything.done():
        return everything.result(), []
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)  # each item's own cleanup has run
    if everything.done() and not everything.cancelled():
        everything.exception()  # retrieved: no "exception was never retrieved" at exit
    kept = [t.result() for t in tasks if not t.cancelled() and t.exception() is None]
    return kept, [i for i, t in enumerate(tasks) if t.cancelled()]


def execute_batch(store: RunStore, run_id: str, keys: list[str], max_in_flight: int,
                  enqueue_aggregate: Callable[[str], None], enqueue_judge: Enqueue,
                  time_limit_s: float | None = None, store_url: str | None = None, blob_dir: str | None = None,
                  starts: dict[str, int] | None = None, stop_on_cancel: bool = False,
                  hand_on: Callable[[Outcome], bool] | None = None) -> int:
    """Call the adapter for the batch's unfinished items; returns how many were called. ``starts``
    (spawn tasks, ``note_starts``): an item whose earlier tasks died with their worker is retried, then
    given up (``_worker_deaths``). With ``stop_on_cancel`` (agent items: minutes each), a cancel of the
    run while the batch runs stops its items within a poll (``cancel_watch``): they are not recorded
    (``resume`` runs them again) and their start is not counted as a dead worker's. ``hand_on`` (spawn
    tasks) sees each called item's outcome first: True means it was sent to another attempt (an infra
    failure retried on the queue), so it is not recorded."""
    ctx = _known_context(store, run_id, store_url, blob_dir)
    if ctx is None:
        return 0
    state, _, pending, raws = store.batch_view(run_id, keys)  # one round trip
    if state in STOPPED:
        return 0
    items = [Item.from_dict(json.loads(raws[k])) for k in keys if k in raws]
    engine = ctx.engine
    deaths: dict[str, int] = {}
    if starts:
        items, given_up, deaths = _worker_deaths(starts, items, engine)
        if given_up:
            _record(store, ctx, run_id, given_up, enqueue_aggregate)
    deadline = _deadline(time_limit_s)
    start = time.perf_counter()  # an item's wait counts from here: it is in this worker's hands
    progress = None if engine.judged else _Progressive(store, ctx, run_id, enqueue_aggregate)

    async def one(item: Item) -> Outcome | InfrastructureError:
        result = await _kept(within(deadline, ctx.held(engine.call(item, start)), item, "adapter"))
        if hand_on is not None and isinstance(result, Outcome) and await asyncio.to_thread(hand_on, result):
            return None  # type: ignore[return-value]  # handed on: another attempt records it
        if deaths.get(item.key) and isinstance(result, Outcome) and isinstance(result.agent, dict):
            result.agent["worker_deaths"] = deaths[item.key]  # it ran again after its worker died
        if progress is not None and isinstance(result, Outcome):
            await progress.add(engine.decide(result))
        return result

    watch = (lambda stop: CANCEL_WATCH.watching(store, run_id, stop)) if stop_on_cancel else None

    async def batch() -> tuple[list[Outcome | InfrastructureError], list[int]]:
        try:
            return await _unless_stopped(ctx.in_flight(max_in_flight), max_in_flight, [lambda i=i: one(i) for i in items],
                                         ctx.lanes([i.adapter for i in items]), watch)
        finally:
            if progress is not None:
                await progress.flush()

    results, stopped = WORKER_LOOP.run(batch) if items else ([], [])
    if stopped:
        log.warning("batch_stopped_by_cancel", run_id=run_id, stopped=len(stopped), finished=len(results),
                    state=store.get_state(run_id))
        for i in stopped if starts else ():  # stopped by the cancel, not by a dead worker
            store.unnote_start(run_id, items[i].key)
    outcomes, failed = _split(results)
    if progress is None:
        needs_judge = [o for o in outcomes if o.error is None and not o.skipped]  # budget-skipped: nothing to judge
        judged_ids = {id(o) for o in needs_judge}
        final = [engine.decide(o) for o in outcomes if id(o) not in judged_ids]
        if needs_judge or pending:
            store.put_pending(run_id, [o.to_dict() for o in needs_judge])
            enqueue_judge(run_id, [o.key for o in needs_judge] + sorted(pending))
        _record(store, ctx, run_id, final, enqueue_aggregate)
    elif not progress.recorded:  # nothing new (a redelivered, finished batch): is the run complete?
        _record(store, ctx, run_id, [], enqueue_aggregate)
    _raise_for(failed, len(items))
    return len(outcomes)


def execute_judge(store: RunStore, run_id: str, keys: list[str], max_in_flight: int,
                  enqueue_aggregate: Callable[[str], None], time_limit_s: float | None = None,
                  store_url: str | None = None, blob_dir: str | None = None) -> int:
    """Judge called-but-unjudged items and record them; returns how many were judged."""
    ctx = context_for(store, run_id, store_url, blob_dir)
    if ctx is None or _cancelled(store, run_id):
        return 0
    done = store.done_keys(run_id, keys)
    open_keys = [k for k in keys if k not in done]
    partial = {o["key"]: Outcome.from_dict(o) for o in store.get_pending(run_id, open_keys) if o}
    raws = store.get_items(run_id, list(partial))
    pairs = [(Item.from_dict(json.loads(raw)), partial[k]) for k, raw in zip(partial, raws) if raw]
    engine = ctx.engine
    deadline = _deadline(time_limit_s)
    judged, failed = _split(WORKER_LOOP.run(lambda: _each(ctx.in_flight(max_in_flight), max_in_flight, [
        lambda i=i, o=o: _kept(within(deadline, ctx.held(engine.judge(i, o)), i, "judge", o)) for i, o in pairs],
        ctx.lanes([None] * len(pairs)))) if pairs else [])
    _record(store, ctx, run_id, judged, enqueue_aggregate)
    _raise_for(failed, len(pairs))
    return len(judged)


def _segment_deltas(lines: list[str]) -> dict[str, int]:
    """A whole segment's counts (done, errors, spend; in total and per adapter), added once to the run's."""
    from ..store import cost_meta

    deltas: dict[str, int] = {}
    for line in lines:
        o = json.loads(line)
        err, cost = cost_meta(o)
        a = o.get("adapter")
        for field, n in (("done", 1), ("errors", err), ("cost_nusd", cost)):
            if n:
                deltas[field] = deltas.get(field, 0) + n
                deltas[f"{field}:{a}"] = deltas.get(f"{field}:{a}", 0) + n
    return deltas


def execute_segment(store, run_id: str, seg: int, max_in_flight: int, enqueue_aggregate: Callable[[str], None],
                    time_limit_s: float | None = None, store_url: str | None = None,
                    blob_dir: str | None = None) -> int:
    """See ``_execute_segment``; the archive unreachable (a volume gone, S3 down) is an infrastructure
    error: the batch keeps its message and runs again, it is never an item's outcome."""
    from ..archive import archive_errors

    try:
        return _execute_segment(store, run_id, seg, max_in_flight, enqueue_aggregate, time_limit_s, store_url,
                                blob_dir)
    except archive_errors() as exc:
        raise InfrastructureError(f"the run archive is not reachable: {type(exc).__name__}: {exc}") from exc


def _execute_segment(store, run_id: str, seg: int, max_in_flight: int, enqueue_aggregate: Callable[[str], None],
                     time_limit_s: float | None = None, store_url: str | None = None,
                     blob_dir: str | None = None) -> int:
    """An archived run's batch (``executors/archive.py``): its items come from the archive's plan segment,
    both stages run here (call, then judge), and the segment's outcomes go to the archive in one file
    before its bit is set in Redis. Items an earlier attempt archived are not called again (a retried or
    redelivered batch, a resume after Redis lost its data). Returns how many items were called."""
    from ..archive import RunArchive

    ctx = _live_context(store, run_id, store_url, blob_dir)
    if ctx is None:
        return 0
    run = RunArchive.of(ctx.meta["archive"], run_id)
    if store.segment_done(run_id, seg):
        _claim_if_complete(store, ctx, run_id, store.counters(run_id).get("done", 0), enqueue_aggregate)
        return 0
    plan = [json.loads(line) for line in run.plan(seg)]
    keys = [data["key"] for data in plan]
    have = run.out(seg)
    items = [Item.from_dict(data) for data in plan if data["key"] not in have]
    del plan
    engine = ctx.engine
    deadline = _deadline(time_limit_s)
    start = time.perf_counter()

    async def both(item: Item) -> Outcome:
        return await engine.judge(item, await engine.call(item, start))

    outcomes, failed = _split(WORKER_LOOP.run(lambda: _each(ctx.in_flight(max_in_flight), max_in_flight, [
        lambda i=i: _kept(within(deadline, ctx.held(both(i)), i, "adapter")) for i in items],
        ctx.lanes([i.adapter for i in items]))) if items else [])
    have.update((o.key, json.dumps(o.to_dict())) for o in outcomes)
    if outcomes:  # in plan order: the report is the segments concatenated
        run.put_out(seg, [have[k] for k in keys if k in have])
    _raise_for(failed, len(items))  # the archived part stays; the batch runs again for the rest
    lines = [have[k] for k in keys]
    finished = store.mark_segment(run_id, seg, len(outcomes), _segment_deltas(lines))
    if finished < 0:
        log.warning("run_vanished", run_id=run_id, archived=len(outcomes))  # archived: a resume finds them
        return len(outcomes)
    _claim_if_complete(store, ctx, run_id, finished, enqueue_aggregate)
    return len(outcomes)


def _claim_if_complete(store, ctx: RunContext, run_id: str, finished: int,
                       enqueue_aggregate: Callable[[str], None]) -> None:
    if finished >= ctx.meta["total"] and store.claim(run_id, "aggregate"):
        try:
            enqueue_aggregate(run_id)
        except BaseException:
            store.release(run_id, "aggregate")
            raise
