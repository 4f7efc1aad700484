"""The farm backend: store a plan in Redis, dispatch batches, watch counters, resume, cancel.

It never waits on Celery results (a big chord's result pub/sub costs O(N^2) client CPU,
see DESIGN.md): it polls the store's counters and reads the report the aggregate task
stored. The whole plan is written to the store before any batch is sent, so a coordinator
that dies can be replaced: ``resume`` dispatches only what is neither done, nor waiting
for the judge, nor still in the broker.

A plain run's path imports neither Celery nor the agents' and provider batches' modules (``spawn``,
``batches``: imported where a run has such items, or by ``status``, ``resume`` and ``cancel``): its
messages go through ``messages.Publisher``, and start-up is most of a small run's time (issue 17).
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import deque
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import chain, islice
from typing import Any, Callable, Iterable, Iterator

import redis

from ...core.plan import store_rows
from ...engine.items import Engine
from ...errors import EXIT_INTERNAL, EvalfarmError, FarmError, InfrastructureError, Interrupted
from ...redact import redact
from ...core.plan import Plan
from ..base import ProgressFn
from ..finalize import run_ttl_s
from ..store import Progress, batched, progress_of
from .broker_scan import broker_keys, broker_segments, keys_in_broker
from .messages import AGGREGATE, JUDGE_BATCH, RUN_BATCH, Publisher, redis_broker
from .room import full, is_oom, no_room, run_bytes
from .routing import agent_adapters, batched_adapters
from .settings import FarmSettings, pick_batch_size
from .store import probe, store_for


LOCK = "resume"  # ef:run:<id>:lock:resume: one coordinator dispatches a run at a time (start or resume)
LOCK_TTL_S = 5.0  # a dead holder's lock is gone this long after it stopped refreshing it
CHECK_EVERY_S = 0.25  # while dispatching: refresh the lock and read the state this often
LIVE_STATES = ("planning", "dispatching", "running")
SAMPLE_ITEMS = 200  # the plan's first items, measured to estimate the run's size in Redis


def bit(bits: bytes, n: int) -> bool:
    """Bit ``n`` of a Redis bitmap (GETBIT's order: most significant bit of each byte first)."""
    return n // 8 < len(bits) and bool(bits[n // 8] & (0x80 >> (n % 8)))


def seg_size(meta: dict[str, Any], seg: int) -> int:
    """Items in segment ``seg`` of an archived run (the last one may be short)."""
    b = int(meta["batch_size"])
    return max(0, min(b, int(meta["total"]) - seg * b))


def say(message: str) -> None:
    """A line for the user watching a run (the progress bar shares stderr)."""
    print(f"evalfarm: {message}", file=sys.stderr, flush=True)


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from (kombu wraps the Redis error it got)."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


class RunCancelled(FarmError):
    exit_code = 1


class RunVanished(FarmError):
    """The run's keys are gone from Redis (restarted without persistence, flushed, evicted)."""

    exit_code = EXIT_INTERNAL


class RunBusy(FarmError):
    """Another coordinator holds the run's dispatch lock."""


class _Guard:
    """Held while dispatching: keeps the run's lock alive and notices a cancel or a lost run
    within ``CHECK_EVERY_S``, so a dispatch stops instead of undoing either."""

    def __init__(self, backend: "CeleryBackend", run_id: str, token: str) -> None:
        self.backend, self.run_id, self.token = backend, run_id, token
        self.checked = time.monotonic()

    def check(self, force: bool = False) -> None:
        if not force and time.monotonic() - self.checked < CHECK_EVERY_S:
            return
        self.checked = time.monotonic()
        store = self.backend.store
        if not store.refresh_lock(self.run_id, LOCK, self.token, LOCK_TTL_S):
            raise RunBusy(f"run {self.run_id}: another coordinator took over its dispatch; "
                          f"'evalfarm wait {self.run_id}' attaches to it")
        state = store.get_state(self.run_id)
        if state in (None, "cancelled", "failed"):
            raise self.backend.stopped_error(self.run_id, state)


class CeleryBackend:
    mode = "redis"

    def __init__(self, settings: FarmSettings, connect_timeout_s: float | None = None) -> None:
        self.settings = settings
        url = settings.run_store_url
        print(f"evalfarm: connecting to {redact(url)} ...", file=sys.stderr, flush=True)
        try:
            probe(url, connect_timeout_s if connect_timeout_s is not None else settings.connect_timeout_s)
        except Exception as exc:
            raise FarmError(f"cannot reach the run store at {redact(url)}: "
                            f"{redact(str(exc)).rstrip('.')}; is Redis running? (--broker / EVALFARM_BROKER_URL)") from None
        self._app = None
        self.store = store_for(url)
        # the broker's Redis, when it is the run store's (the default): task messages go there without Celery
        self.publisher = Publisher(self.store.r) if redis_broker(settings.broker_url) and \
            settings.broker_url == url else None
        self._meta: dict[str, dict[str, Any]] = {}
        self._suspects: dict[str, set[str]] = {}  # run -> items nobody held at the last stall check
        self._slots_said: dict[str, str] = {}  # run -> the fleet-slot holding last said
        self._queues_said: dict[str, set[str]] = {}  # run -> queues said to have no consumer

    @property
    def app(self):
        """Celery's app, built when first needed: provider batches, agent items, a non-Redis broker
        (a plain run's batches go through ``publisher``; importing Celery costs ~0.12 s of CPU)."""
        if self._app is None:
            from .app import create_app

            self._app = create_app(self.settings)
        return self._app

    def _send(self, task: str, args: list[Any], queue: str) -> None:
        if self.publisher is not None:
            self.publisher.send(task, args, queue)
        else:
            self.app.send_task(task, args=args, queue=queue)

    @contextmanager
    def _outbox(self, every: int = 64) -> Iterator[Callable[[str, list[Any], str], None]]:
        """``send(task, args, queue)`` for a dispatch: through the publisher, ``every`` messages to a
        round trip (the rest when the block ends without an error: a dispatch stopped by a cancel or a
        lost lock sends no more), else through Celery's producer."""
        if self.publisher is None:
            with self.app.producer_or_acquire() as producer:
                yield lambda task, args, queue: self.app.send_task(task, args=args, producer=producer, queue=queue)
            return
        waiting: list[tuple[str, list[Any], str]] = []

        def send(task: str, args: list[Any], queue: str) -> None:
            waiting.append((task, args, queue))
            if len(waiting) >= every:
                self.publisher.send_many(waiting)  # type: ignore[union-attr]
                waiting.clear()

        yield send
        self.publisher.send_many(waiting)

    # -- submit ---------------------------------------------------------------------------
    def start(self, plan: Plan, engine: Engine | None = None, on_progress: ProgressFn | None = None) -> None:
        """Store the whole plan, then dispatch it: a coordinator that dies mid-dispatch leaves a run
        that ``resume`` can finish exactly. A run that will not fit in Redis is refused before
        anything is stored; a plan that fails half-way is removed. The run's lock is held from the
        start, so a ``resume`` cannot dispatch beside a live coordinator.

        A replay (re-scoring: the engine has ``stored`` outcomes) runs stage 1 here, from the stored
        outputs, and leaves the items the judge must see in the judge backlog, exactly where a worker
        leaves them after calling a model: only judge batches are sent, and no provider worker ever
        sees the run."""
        batch_size = pick_batch_size(plan.total, self.settings.batch_size)
        run_id = plan.run_id
        replay = engine is not None and engine.stored is not None
        if self.settings.archive and not replay and not agent_adapters(plan.meta(self.mode)):
            return self._start_archived(plan, batch_size)
        items = plan.items()
        sample = list(islice(items, SAMPLE_ITEMS))
        problem = no_room(self.store.r, plan.total, run_bytes(plan.total, (len(i.key) + len(i.to_json())
                                                                             for i in sample)))
        if problem:
            raise FarmError(f"run not started: {problem}")
        self.store.create_run(run_id, plan.meta(self.mode, batch_size=batch_size))
        token = self.store.acquire_lock(run_id, LOCK, LOCK_TTL_S) or ""
        guard = _Guard(self, run_id, token)
        # fault injection for the planning tests: slow planning down so it can fail or die half-way
        delay = float(os.environ.get("EVALFARM_FAILPOINT_PLAN_DELAY_S", "0") or 0)
        try:
            for chunk in batched(chain(sample, items), max(batch_size, 1000 // batch_size * batch_size)):
                self.store.add_items(run_id, *store_rows(chunk))
                if replay:
                    self._replay(run_id, engine, chunk)  # type: ignore[arg-type]
                guard.check()
                if delay:
                    time.sleep(delay)
            self.store.persist_plan(run_id)
            ok, state = self.store.transition(run_id, "dispatching", ("planning",), planned=True,
                                              spec_hash=plan.spec_hash)
            if not ok:
                raise self.stopped_error(run_id, state)
        except BaseException as exc:
            raise self._planning_failed(run_id, plan.total, exc, token) from None
        if replay:
            backlog = self.store.pending_keys(run_id)
            self._dispatch(guard, (), batched(backlog, batch_size))
            if not backlog:  # nothing for the judge: the coordinator claims the aggregate itself
                self.kick_aggregate(run_id)
            return
        self._dispatch(guard, batched(self.store.iter_item_keys(run_id), batch_size))

    def _start_archived(self, plan: Plan, batch_size: int) -> None:
        """A run whose plan and outcomes live on the archive (EVALFARM_ARCHIVE): Redis gets the meta, and
        later a bit per finished segment and the counters; the plan streams to the archive a segment
        (one batch) at a time, then its meta, then one message per segment carries only the segment's
        number. Redis needs the same few hundred bytes whatever the run's size."""
        from ..archive import RunArchive

        run_id = plan.run_id
        run = RunArchive.of(self.settings.archive or "", run_id)
        meta = plan.meta(self.mode, batch_size=batch_size, archive=self.settings.archive)
        self.store.create_run(run_id, meta)
        token = self.store.acquire_lock(run_id, LOCK, LOCK_TTL_S) or ""
        guard = _Guard(self, run_id, token)
        segments = 0
        try:
            # the segments go up 8 at a time (an S3 PUT is tens of ms), at most 32 waiting in memory
            with ThreadPoolExecutor(8, thread_name_prefix="evalfarm-plan") as pool:
                writing: deque = deque()
                for chunk in batched(plan.items(), batch_size):
                    rows, prompts = store_rows(chunk)
                    writing.append(pool.submit(run.put_plan, segments, [body for _, body in rows], prompts))
                    segments += 1
                    if len(writing) >= 32:
                        writing.popleft().result()
                    if segments % 50 == 0:
                        self.store.touch_plan(run_id)  # a long plan's meta must not expire while it is written
                    guard.check()
                for f in writing:
                    f.result()
            self.store.persist_plan(run_id)
            ok, state = self.store.transition(run_id, "dispatching", ("planning",), planned=True,
                                              spec_hash=plan.spec_hash, segments=segments)
            if not ok:
                raise self.stopped_error(run_id, state)
            run.put_meta({**meta, "planned": True, "spec_hash": plan.spec_hash, "segments": segments,
                          "state": "dispatching"})
        except BaseException as exc:
            raise self._planning_failed(run_id, plan.total, exc, token) from None
        self._dispatch_segments(guard, range(segments))

    def _dispatch_segments(self, guard: _Guard, segments: Iterable[int]) -> None:
        """One message per segment, ``[run_id, [], seg]``: the items are on the archive."""
        run_id = guard.run_id
        sent = 0
        try:
            with self._outbox() as send:
                for seg in segments:
                    guard.check()
                    send(RUN_BATCH, [run_id, [], seg], "provider")
                    sent += 1
            ok, state = self.store.transition(run_id, "running", ("dispatching",))
            if not ok and state != "done":
                raise self.stopped_error(run_id, state)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted while dispatching run {run_id} ({sent:,} batches sent, they run on): "
                              f"'evalfarm resume {run_id}' sends the rest, 'evalfarm cancel {run_id}' stops "
                              "it") from None
        finally:
            self.store.release_lock(run_id, LOCK, guard.token)

    def _replay(self, run_id: str, engine: Engine, chunk: list) -> None:
        """Stage 1 of a re-scoring run's items, from the stored outputs: the judge's items go to the
        backlog, the rest are final."""
        pending, final = [], []
        for item in chunk:
            out = engine.replay(item)
            if engine.needs_judge(out):
                pending.append(out.to_dict())
            else:
                final.append(engine.decide(out).to_dict())
        if pending:
            self.store.put_pending(run_id, pending)
        if final:
            self.store.record(run_id, final)

    def _planning_failed(self, run_id: str, total: int, exc: BaseException, token: str) -> BaseException:
        """Remove a half-stored plan (deleting works on a full Redis too) and mark the run failed,
        so nothing is left behind without an expiry; returns what to raise."""
        stored = 0
        try:
            stored = self.store.discard_plan(run_id)
            reason = (f"planning stopped after {stored:,} of {total:,} items ({type(exc).__name__}); "
                      "nothing was dispatched")
            self.store.transition(run_id, "failed", ("planning",), failure=reason)  # a cancel stays
            self.store.release_lock(run_id, LOCK, token)
            self.store.expire_run(run_id, run_ttl_s())
        except redis.exceptions.RedisError:
            try:
                self.store.expire_run(run_id, 1)  # EXPIRE works on a full Redis: leave nothing behind
            except redis.exceptions.RedisError:
                pass  # Redis is gone: the plan's keys expire by themselves (PLANNING_TTL_S)
        if isinstance(exc, EvalfarmError) or not isinstance(exc, Exception):
            return exc  # a cancel, a vanished run, Ctrl-C: already says what happened
        if any(is_oom(e) for e in causes(exc)):
            return FarmError(f"Redis ran out of memory while storing the plan of run {run_id} ({stored:,} of "
                             f"{total:,} items stored, nothing dispatched, nothing spent); the partial plan is "
                             f"removed: {full(self.store.r) or 'Redis is full'}; raise maxmemory (redis-cli "
                             "CONFIG SET maxmemory ...) or free memory, and run the spec again")
        if isinstance(exc, redis.exceptions.RedisError):
            return InfrastructureError(f"lost the run store at {redact(self.settings.run_store_url)} while "
                                       f"storing the plan of run {run_id}: {redact(str(exc))[:200]}; nothing was "
                                       "dispatched and the partial plan expires by itself; run the spec again")
        return exc

    def _dispatch(self, guard: _Guard, batches: Iterable[list[str]], judge: Iterable[list[str]] = ()) -> None:
        """Send the batches, then move the run from dispatching to running: only from dispatching,
        so a cancel that came meanwhile stays (and stops the dispatch within a check)."""
        run_id = guard.run_id
        # fault injection for the crash tests: slow dispatch down so a coordinator can die mid-way
        delay = float(os.environ.get("EVALFARM_FAILPOINT_DISPATCH_DELAY_S", "0") or 0)
        meta = self.store.get_meta(run_id)
        if agent_adapters(meta):  # agent items: one task each, spawn queue
            from .spawn import route_spawn

            batches = route_spawn(self.settings, self.store, run_id, batches)
        if batched_adapters(meta):  # batch: true items: provider batches
            from .batches import route_batches

            batches = route_batches(self.app, self.store, run_id, batches, delay)
        sent = 0
        try:
            with self._outbox(1 if delay else 64) as send:
                for keys in batches:
                    guard.check()
                    send(RUN_BATCH, [run_id, keys], "provider")
                    sent += 1
                    if delay:
                        time.sleep(delay)
                for keys in judge:
                    guard.check()
                    send(JUDGE_BATCH, [run_id, keys], "judge")
                    sent += 1
            ok, state = self.store.transition(run_id, "running", ("dispatching",))
            if not ok and state != "done":  # done: a small run's items were run and aggregated before this line
                raise self.stopped_error(run_id, state)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted while dispatching run {run_id} ({sent:,} batches sent, they run on): "
                              f"'evalfarm resume {run_id}' sends the rest, 'evalfarm cancel {run_id}' stops "
                              "it") from None
        except Exception as exc:
            if any(is_oom(e) for e in causes(exc)):
                raise FarmError(f"Redis ran out of memory while dispatching run {run_id} ({sent:,} batches sent): "
                                f"{full(self.store.r) or 'Redis is full'}; raise maxmemory (redis-cli CONFIG SET "
                                f"maxmemory ...) or free memory, then 'evalfarm resume {run_id}' sends the rest") \
                    from None
            raise
        finally:
            self.store.release_lock(run_id, LOCK, guard.token)

    def stopped_error(self, run_id: str, state: str | None) -> FarmError:
        """Why a run cannot go on: cancelled, failed, or gone from the store."""
        meta = self.store.get_meta(run_id)
        if meta is None:
            return self.vanished(run_id)
        done = self.store.counters(run_id).get("done", 0)
        if state == "cancelled":
            return RunCancelled(f"run {run_id} was cancelled at {done}/{meta['total']} items; "
                                f"'evalfarm resume {run_id}' continues it")
        if state == "failed":
            return FarmError(f"run {run_id} failed: {meta.get('failure') or 'see evalfarm status'}")
        return FarmError(f"run {run_id} is {state} (another coordinator changed it); "
                         f"'evalfarm status {run_id}' shows where it stands")

    def _on_archive(self, run_id: str) -> bool:
        """The run's plan is on this farm's archive (EVALFARM_ARCHIVE)."""
        from ..archive import RunArchive

        return bool(self.settings.archive) and RunArchive.of(self.settings.archive or "", run_id).meta() is not None

    def vanished(self, run_id: str) -> RunVanished:
        if self._on_archive(run_id):
            return RunVanished(f"run {run_id} vanished from the run store at {redact(self.settings.run_store_url)} "
                               f"(Redis lost its data); its plan and every finished batch are on the archive: "
                               f"'evalfarm resume {run_id}' runs only what was not archived")
        return RunVanished(f"run {run_id} vanished from the run store at {redact(self.settings.run_store_url)}: "
                           "Redis lost its data (restarted without appendonly, flushed or evicted), and with it "
                           "the plan and every result so far; run the spec again (Redis with appendonly yes "
                           "keeps runs through a restart)")

    # -- watch ----------------------------------------------------------------------------
    def meta(self, run_id: str) -> dict[str, Any]:
        meta = self.store.get_meta(run_id)
        if meta is None:
            if self._on_archive(run_id):  # Redis lost it, the archive has it: say how to go on
                raise self.vanished(run_id)
            raise FarmError(f"run {run_id!r} not found in the run store; 'evalfarm status' lists the runs it has")
        return meta

    def progress(self, run_id: str) -> Progress:
        """The meta's static part (total, adapters, start) is read once per run, not on every poll."""
        meta = self._meta.get(run_id)
        if meta is None:
            meta = self._meta[run_id] = self.meta(run_id)
        self._settle([meta])
        return progress_of(self.store, run_id, meta)

    def _settle(self, metas: list[dict[str, Any]]) -> None:
        """A Redis that restarted after these runs began has not yet heard the workers state their
        counter records again: wait for that (at most a few seconds) rather than show counts that
        went backwards."""
        started = []
        for meta in metas:
            try:
                when = datetime.fromisoformat(meta["started_at"])
            except (KeyError, ValueError, TypeError):
                continue
            if when.tzinfo is not None:  # an untrusted value: a naive time cannot be compared
                started.append(when)
        settle = self.store.records_settle_s(min(started)) if started else 0.0
        if settle > 0:
            time.sleep(settle)

    def wait(self, run_id: str, on_progress: ProgressFn | None = None, timeout_s: float | None = None,
             poll_s: float = 0.1, stall_s: float = 10.0) -> None:
        """Poll counters until the report exists. If every item is done but no report appears for
        ``stall_s`` (the aggregate message was lost, e.g. in a broker restart), the aggregate is sent
        again: it is idempotent. A cancelled run, or one whose keys vanished, ends the wait at once."""
        from .store_watch import StoreWatch

        try:
            with StoreWatch(self.settings.run_store_url, run_id) as watch:
                self._wait(run_id, on_progress, timeout_s, poll_s, stall_s, watch.ok)
        except redis.exceptions.RedisError as exc:  # the store client's own retries (~30 s) gave up
            raise InfrastructureError(
                f"lost the run store at {redact(self.settings.run_store_url)} while waiting for run {run_id}: "
                f"{redact(str(exc))[:200]}; the run goes on if Redis comes back: 'evalfarm wait {run_id}' "
                "attaches again") from None

    def _wait(self, run_id: str, on_progress: ProgressFn | None, timeout_s: float | None, poll_s: float,
              stall_s: float, answered=lambda: None) -> None:
        started = time.monotonic()
        complete_since: float | None = None
        warned = lost_said = False
        moved_at, checked_at, last, diagnosis = time.monotonic(), time.monotonic(), None, None
        while True:
            if self.store.report_size(run_id):
                if on_progress is not None:
                    on_progress(self.progress(run_id))
                self._late_cancel_notice(run_id)
                return
            p = self.progress(run_id)
            answered()
            if on_progress is not None:
                on_progress(p)
            if p.state in ("?", "cancelled", "failed"):
                raise self.stopped_error(run_id, None if p.state == "?" else p.state)
            if not warned and p.executed == 0 and time.monotonic() - started > self.settings.idle_warning_s:
                warned = True
                from .batches import open_batches_line
                waiting = open_batches_line(self.store, run_id)
                if waiting:  # a provider batch may take hours: nothing is wrong, say what the run waits for
                    print(f"evalfarm: run {run_id} waits on {waiting}", file=sys.stderr, flush=True)
                else:
                    print(f"evalfarm: warning: no item of run {run_id} has finished after "
                          f"{self.settings.idle_warning_s:.0f} s: is a worker consuming the provider queue? "
                          "(evalfarm worker --broker ...)", file=sys.stderr, flush=True)
            if p.lost_seen and not lost_said:
                lost_said = True
                say(f"run {run_id}: the run store lost {p.lost_seen:,} finished results (Redis restored from an "
                    "older snapshot?); they run again by themselves" + (
                        f": done holds at {p.done:,} until they are back" if p.lost else ": they are back") +
                    ", executions count every call")
            now = (p.stored, p.executed, p.pending_judge)
            if now != last:
                moved_at, last = time.monotonic(), now
            # every stall_notice_s; once Redis was found full, every second while the run moves again,
            # so the user hears at once that it has room
            moving = time.monotonic() - moved_at < 1.0
            every = 1.0 if diagnosis == "full" and moving else self.settings.stall_notice_s
            if time.monotonic() - checked_at > every and (p.stored < p.total or diagnosis == "full"):
                checked_at = time.monotonic()
                diagnosis = self._diagnose(run_id, p, time.monotonic() - moved_at, diagnosis)
            if p.stored >= p.total:
                complete_since = complete_since or time.monotonic()
                if time.monotonic() - complete_since > stall_s and not self.store.aggregating(run_id):
                    self.kick_aggregate(run_id)
                    complete_since = time.monotonic()
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise FarmError(f"run {run_id} not finished after {timeout_s:.0f} s; "
                                f"'evalfarm status {run_id}' shows where it stands")
            self.store.nap(run_id, poll_s)  # poll_s, or less: the aggregate wakes it when the report is stored

    def _diagnose(self, run_id: str, p: Progress, quiet_s: float, said: str | None) -> str | None:
        """Checked every ``stall_notice_s`` while a run is not complete; each reason is said once:
        Redis at its memory limit (workers keep their tasks and go on when it has room), or items
        that nobody holds while the run has not moved (the broker lost them)."""
        why = full(self.store.r)
        if why is not None:
            if said != "full":
                say(f"run {run_id} ({p.done:,}/{p.total:,} done): {why}, so workers cannot record results; "
                    "they keep their tasks and retry. Raise maxmemory (redis-cli CONFIG SET maxmemory ...) or "
                    "free memory, and the run goes on by itself")
            return "full"
        if said == "full":
            say(f"run {run_id}: Redis has room again; the run goes on ({p.done:,}/{p.total:,} done)")
            said = None
        if quiet_s >= self.settings.stall_notice_s:
            self._slots_notice(run_id, p)
            self._queue_notice(run_id, p)
        if quiet_s < self.settings.stall_notice_s or not p.executed:
            self._suspects.pop(run_id, None)
            return said if said != "stalled" else None
        missing, judge_missing, _, _ = self.missing(run_id)
        # a task a worker took while Redis was full is recorded as in its hands at the next sweep
        # (<= 10 s): only items missing at two checks in a row are lost
        suspects = set(missing) | set(judge_missing)
        lost = len(suspects & self._suspects.get(run_id, set()))
        self._suspects[run_id] = suspects
        if lost:
            if said != "stalled":
                say(f"run {run_id} has stalled at {p.done:,}/{p.total:,}: {lost:,} items are neither done, nor "
                    f"queued, nor in a worker's hands (the broker lost them); 'evalfarm resume {run_id}' "
                    "dispatches them")
            return "stalled"
        return said

    def fleet_slots(self, run_id: str) -> str | None:
        """Who holds the run's ``--concurrency`` slots (None: the run has no cap, or none is held)."""
        cap = ((self._meta.get(run_id) or self.meta(run_id)).get("options") or {}).get("max_in_flight")
        if not cap:
            return None
        from .leases import describe

        return describe(self.store.r, f"run:{run_id}", int(cap))

    def _slots_notice(self, run_id: str, p: Progress) -> None:
        """A quiet run with a ``--concurrency`` cap: say who holds its slots (each distinct holding once)."""
        note = self.fleet_slots(run_id)
        if note and self._slots_said.get(run_id) != note.split(" (")[0]:
            self._slots_said[run_id] = note.split(" (")[0]
            say(f"run {run_id} ({p.done:,}/{p.total:,} done) waits for its fleet slots: {note}")

    def _queue_notice(self, run_id: str, p: Progress) -> None:
        """A quiet run whose batches sit on a queue no live worker consumes: say which queue and which
        pool to start (once per queue)."""
        from .broker_scan import consumed_queues, queued_per_queue
        from .spawn import _client, spawn_broker_url

        waiting = queued_per_queue(self.store.r, run_id, ("provider", "judge", "aggregate"))
        url = spawn_broker_url(self.settings)
        spawn_r = self.store.r if url == self.settings.broker_url else _client(url)
        waiting.update(queued_per_queue(spawn_r, run_id, ("spawn",)))
        live = consumed_queues(self.store.r)
        if live is None:
            return
        said = self._queues_said.setdefault(run_id, set())
        for queue, n in sorted(waiting.items()):
            if queue not in live and queue not in said:
                said.add(queue)
                say(f"run {run_id} ({p.done:,}/{p.total:,} done): {n:,} task(s) wait on the '{queue}' queue and no "
                    f"live worker consumes it: start 'evalfarm worker --pool {queue}' (or --pool all, which serves "
                    "provider, judge, aggregate and spawn)")

    def _late_cancel_notice(self, run_id: str) -> None:
        meta = self.store.get_meta(run_id) or {}
        if meta.get("cancel_too_late") or meta.get("previous_state") == "cancelled":
            print(f"evalfarm: the cancel of run {run_id} came too late: every remaining item was already in "
                  "a worker's hands, and the run finished; its full report follows", file=sys.stderr, flush=True)

    # -- recovery and control -------------------------------------------------------------
    def kick_aggregate(self, run_id: str) -> None:
        try:
            self.store.release(run_id, "aggregate")
            if self.store.claim(run_id, "aggregate"):
                self._send(AGGREGATE, [run_id], "aggregate")
        except Exception as exc:
            if not any(is_oom(e) for e in causes(exc)):
                raise
            self.store.release(run_id, "aggregate")  # a full Redis: the next kick tries again

    def in_broker(self, run_id: str) -> set[str]:
        from .spawn import spawn_keys_in_broker
        return keys_in_broker(self.store.r, run_id)[0] | spawn_keys_in_broker(self.settings, run_id)

    def open_items(self, run_id: str) -> tuple[int, int]:
        """(items of the run waiting in a queue, items in a worker's hands), neither done nor awaiting
        the judge. A batch's message carries every item of the batch until the batch is acknowledged,
        the ones already recorded included, so the broker's keys alone overcount (``status`` said
        "238/2000 done ... 2000 queued or in flight"). A separate spawn broker's keys count as queued
        (its messages are not told apart)."""
        meta = self._meta.get(run_id) or self.meta(run_id)
        if meta.get("archive") and "segments" in meta:
            q, hands = broker_segments(self.store.r, run_id)
            bits = self.store.segment_bits(run_id)
            return (sum(seg_size(meta, s) for s in q - hands if not bit(bits, s)),
                    sum(seg_size(meta, s) for s in hands if not bit(bits, s)))
        queued, in_hands, _ = broker_keys(self.store.r, run_id)
        from .spawn import spawn_keys_in_broker
        queued |= spawn_keys_in_broker(self.settings, run_id)
        carried = list(queued | in_hands)
        settled = self.store.done_keys(run_id, carried) | self.store.pending_among(run_id, carried)
        in_hands -= settled
        return len(queued - settled - in_hands), len(in_hands)

    def batches(self, run_id: str) -> tuple[list[str], int]:
        """(one line per provider batch of the run, items an unfinished batch holds that are not done)."""
        from .batches import batch_records, lines

        from .batches import keys_in_open_batches
        held = list(keys_in_open_batches(self.store, run_id))
        return lines(batch_records(self.store, run_id)), len(held) - len(self.store.done_keys(run_id, held))

    def _take_lock(self, run_id: str) -> str:
        """The run's dispatch lock; a dead holder's lock expires within ``LOCK_TTL_S``, so wait that
        long before saying that another coordinator is at work."""
        deadline = time.monotonic() + LOCK_TTL_S + 0.5
        while True:
            token = self.store.acquire_lock(run_id, LOCK, LOCK_TTL_S)
            if token is not None:
                return token
            if time.monotonic() > deadline:
                raise RunBusy(f"run {run_id} is being resumed (or dispatched) by another coordinator right now; "
                              f"'evalfarm wait {run_id}' attaches to it")
            time.sleep(0.2)

    def missing(self, run_id: str) -> tuple[list[str], list[str], int, int]:
        """(items neither done, nor awaiting the judge, nor in the broker; items awaiting a judge
        that no message carries; how many are done; how many the broker holds). An archived run
        answers by segment: ``seg:N`` for each missing segment."""
        meta = self._meta.get(run_id) or self.meta(run_id)
        if meta.get("archive"):
            segs = self._missing_segments(run_id, meta)
            return [f"seg:{s}" for s in segs[0]], [], self.store.counters(run_id).get("done", 0), len(segs[1])
        keys = list(self.store.iter_item_keys(run_id))
        done = self.store.done_keys(run_id, keys)
        pending = set(self.store.pending_keys(run_id))
        from .batches import keys_in_open_batches
        queued = self.in_broker(run_id) | keys_in_open_batches(self.store, run_id)  # a provider batch holds them
        missing = [k for k in keys if k not in done and k not in pending and k not in queued]
        judge_missing = sorted(k for k in pending if k not in done and k not in queued)
        return missing, judge_missing, len(done), len(queued)

    def _missing_segments(self, run_id: str, meta: dict[str, Any]) -> tuple[list[int], set[int]]:
        """(an archived run's segments neither finished nor carried by a message, the carried ones)."""
        if "segments" not in meta:  # a meta read while the run was planning
            meta = self._meta[run_id] = self.meta(run_id)
        q, hands = broker_segments(self.store.r, run_id)
        carried = q | hands
        bits = self.store.segment_bits(run_id)
        return [s for s in range(int(meta["segments"])) if not bit(bits, s) and s not in carried], carried

    def _restore(self, run_id: str) -> dict[str, Any] | None:
        """An archived run Redis no longer knows (flushed, restarted without persistence): its meta comes
        back from the archive, with no segment marked; ``resume`` sends every unmarked segment, and a
        worker that finds a segment archived whole only marks it (nothing is called twice)."""
        from ..archive import RunArchive

        if not self.settings.archive:
            return None
        meta = RunArchive.of(self.settings.archive, run_id).meta()
        if meta is None:
            return None
        meta = {**meta, "state": "dispatching", "restored": int(meta.get("restored", 0)) + 1}
        self.store.create_run(run_id, meta)
        self.store.persist_plan(run_id)
        say(f"run {run_id} was gone from Redis; restored from the archive at {self.settings.archive}")
        return meta

    def _resume_archived(self, run_id: str, meta: dict[str, Any]) -> dict[str, int]:
        if self.store.report_size(run_id):
            return {"dispatched": 0, "judge": 0}
        token = self._take_lock(run_id)
        guard = _Guard(self, run_id, token)
        try:
            ok, state = self.store.transition(run_id, "dispatching", ("dispatching", "running", "cancelled"),
                                              resumed=int(meta.get("resumed", 0)) + 1, failure=None)
            if not ok:
                if state == "done" or self.store.report_size(run_id):
                    self.store.release_lock(run_id, LOCK, token)
                    return {"dispatched": 0, "judge": 0}
                raise self.stopped_error(run_id, state)
            missing, carried = self._missing_segments(run_id, meta)
            done = self.store.counters(run_id).get("done", 0)
        except BaseException:
            self.store.release_lock(run_id, LOCK, token)
            raise
        self._dispatch_segments(guard, missing)
        if not missing and done >= meta["total"] and not self.store.aggregating(run_id):
            self.kick_aggregate(run_id)
        return {"dispatched": sum(seg_size(meta, s) for s in missing), "judge": 0, "already_done": done,
                "in_broker": sum(seg_size(meta, s) for s in carried)}

    def resume(self, run_id: str, only: str | None = None) -> dict[str, int]:
        """Dispatch only what is missing; returns what was done. One resume at a time per run. ``only``
        (a failure class, core/failure.py): a finished run's items of that class run again instead.
        An archived run that Redis lost is restored from the archive first."""
        meta = self.store.get_meta(run_id) or self._restore(run_id) or self.meta(run_id)
        if meta.get("archive"):
            if only is not None:
                raise FarmError(f"run {run_id} is archived (EVALFARM_ARCHIVE): resume --only is not available "
                                "for it; run the items of that class again with a new run")
            return self._resume_archived(run_id, meta)
        if only is not None:
            return self._rerun_class(run_id, meta, only)
        if self.store.report_size(run_id):
            return {"dispatched": 0, "judge": 0}
        token = self._take_lock(run_id)
        guard = _Guard(self, run_id, token)
        try:
            if not meta.get("planned"):
                raise self._fail_planning(run_id, meta)
            resumable = ("dispatching", "running", "cancelled") + (("failed",) if meta.get("spend_lost") else ())
            ok, state = self.store.transition(run_id, "dispatching", resumable, resumed=int(meta.get("resumed", 0)) + 1, failure=None,
                                              spend_lost=False)
            if ok and meta.get("spend_lost"):  # the user checked: workers take the records as they are now
                self.store.r.hincrby(f"ef:run:{run_id}:counts", "spend_epoch", 1)
            if not ok:
                if state == "done" or self.store.report_size(run_id):
                    self.store.release_lock(run_id, LOCK, token)
                    return {"dispatched": 0, "judge": 0}
                raise self.stopped_error(run_id, state)
            missing, judge_missing, done, queued = self.missing(run_id)
        except BaseException:
            self.store.release_lock(run_id, LOCK, token)
            raise
        self._dispatch(guard, batched(missing, meta["batch_size"]), batched(judge_missing, meta["batch_size"]))
        if not missing and not judge_missing and done >= meta["total"]:
            self.kick_aggregate(run_id)
        return {"dispatched": len(missing), "judge": len(judge_missing), "already_done": done, "in_broker": queued}

    def _rerun_class(self, run_id: str, meta: dict[str, Any], only: str) -> dict[str, int]:
        """A finished run's items of one failure class (``infra_failed``: the endpoint is back) run
        again: their results are removed, the run reopens, only they are dispatched, and the report is
        built again from every item's result once they are back."""
        if not self.store.report_size(run_id) or self.store.get_state(run_id) != "done":
            raise FarmError(f"run {run_id} has not finished; 'evalfarm resume {run_id}' (without --only) sends "
                            "its missing items, --only re-runs a finished run's items of one class")
        keys = list(self.store.iter_item_keys(run_id))
        chosen: list[tuple[str, str]] = []
        for i in range(0, len(keys), 2000):
            chunk = keys[i:i + 2000]
            for key, raw in zip(chunk, self.store.get_results(run_id, chunk)):
                try:
                    o = json.loads(raw) if raw else None
                except ValueError:
                    o = None
                if isinstance(o, dict) and o.get("failure_class") == only:
                    chosen.append((key, str(o.get("adapter"))))
        if not chosen:
            return {"dispatched": 0, "judge": 0, "already_done": len(keys), "in_broker": 0}
        token = self._take_lock(run_id)
        guard = _Guard(self, run_id, token)
        try:
            ok, state = self.store.transition(run_id, "dispatching", ("done",),
                                              resumed=int(meta.get("resumed", 0)) + 1, rerun=only)
            if not ok:
                raise self.stopped_error(run_id, state)
            self.store.forget(run_id, chosen)
            self.store.clear_report(run_id)
            self.store.release(run_id, "aggregate")
        except BaseException:
            self.store.release_lock(run_id, LOCK, token)
            raise
        self._dispatch(guard, batched([k for k, _ in chosen], meta["batch_size"]))
        return {"dispatched": len(chosen), "judge": 0, "already_done": len(keys) - len(chosen), "in_broker": 0}

    def _fail_planning(self, run_id: str, meta: dict[str, Any]) -> FarmError:
        """A run found in ``planning`` by a resume that holds its lock: its coordinator is gone. The plan
        streamed from the user's dataset file, which only that coordinator read, and no batch is sent
        before the plan is complete: nothing ran, nothing was spent. Remove the partial plan and mark
        the run failed, so its keys expire like a finished run's."""
        if self.store.get_state(run_id) == "failed":
            return self.stopped_error(run_id, "failed")
        stored = self.store.discard_plan(run_id)
        reason = (f"its coordinator stopped while planning ({stored:,} of {meta['total']:,} items stored); "
                  "nothing was dispatched")
        self.store.transition(run_id, "failed", ("planning", "cancelled"), failure=reason)
        self.store.expire_run(run_id, run_ttl_s())
        return FarmError(f"run {run_id} stopped while planning ({stored:,} of {meta['total']:,} items stored, "
                         "before any item was dispatched: nothing ran, nothing was spent); its partial plan is "
                         "removed and the run marked failed: run the spec again")

    def cancel(self, run_id: str) -> dict[str, Any]:
        """Stop a run: workers skip its batches from now on. Says so when the cancel comes too late:
        after the run finished (an error), or when nothing is left to stop (every remaining item is
        already in a worker's hands: the run completes, and ``wait`` says the cancel came too late). An
        agent task in a spawn worker's hands is stopped, not waited for (``cancel_watch``)."""
        meta = self.meta(run_id)
        total = meta["total"]
        state = self.store.get_state(run_id)
        done = self.store.counters(run_id).get("done", 0)
        if state == "done" or self.store.report_size(run_id):
            raise FarmError(f"too late to cancel run {run_id}: it had already finished ({done}/{total} items) "
                            f"when the cancel arrived; 'evalfarm wait {run_id}' saves its report")
        if state == "cancelled":
            return {"outcome": "already", "done": done, "total": total}
        queued: set[str] = set()
        in_hands = 0
        if state == "running":  # dispatch is over: is anything left that a cancel would stop?
            queued, unacked, _ = broker_keys(self.store.r, run_id)
            # an agent in a spawn worker's hands is stopped by the cancel (cancel_watch): not too late for it
            from .spawn import spawn_keys_in_hands
            agents = spawn_keys_in_hands(self.store.r, run_id)
            open_hands = unacked - self.store.done_keys(run_id, sorted(unacked)) - agents
            pending = set(self.store.pending_keys(run_id))
            in_hands = len(open_hands - pending)
            if not queued and done + len(pending | open_hands) >= total:
                self.store.update_meta(run_id, cancel_too_late=True)
                return {"outcome": "too_late", "done": done, "total": total, "in_hands": in_hands}
        ok, state = self.store.transition(run_id, "cancelled", LIVE_STATES, cancelled_at_done=done)
        if ok:
            try:  # the open provider batches, at the provider, now (else a worker's next poll does it)
                from .batches import cancel_open
                cancel_open(self.store, run_id)
            except Exception as exc:
                say(f"run {run_id}: could not cancel its provider batches from here ({redact(str(exc))[:200]}); "
                    "the workers' next poll cancels them")
        if not ok:
            if state == "cancelled":
                return {"outcome": "already", "done": done, "total": total}
            if state == "done":
                raise FarmError(f"too late to cancel run {run_id}: it finished as the cancel arrived; "
                                f"'evalfarm wait {run_id}' saves its report")
            raise self.stopped_error(run_id, state)
        return {"outcome": "cancelled", "done": done, "total": total, "queued": len(queued), "in_hands": in_hands}

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        out = []
        metas = {run_id: self.store.get_meta(run_id) or {} for run_id in self.store.runs()[:limit]}
        self._settle(list(metas.values()))
        for run_id, meta in metas.items():
            c = self.store.counters(run_id)
            out.append({"run_id": run_id, "spec": (meta.get("spec") or {}).get("name"), "state": meta.get("state"),
                        "done": max(c.get("done", 0), c.get("done_seen", 0)), "total": meta.get("total"), "started_at": meta.get("started_at")})
        return out
