"""The spawn queue: one (arm, task, trial) of a coding agent = one Celery task on the ``spawn`` pool.

Items of agent adapters (``provider: agent``) are not batched: the coordinator sends each as its own
task (``route_spawn``, called by ``_dispatch``) to the ``spawn`` queue, on its own broker when
``EVALFARM_SPAWN_BROKER_URL`` is set (see pools.py: Redis redelivers by visibility timeout, and
spawn tasks outlive the other pools'). A spawn worker (``spawn_worker_app``) consumes only that
queue, prefetch 1, acks late; it runs the item through the same ``work.execute_batch`` as every
other item (a finished item is skipped, so a redelivered task is counted once; an infrastructure
error is retried like every task's, ``tasks.until_done``), and sends the judge and aggregate tasks
to the main broker.

Two things are specific to agents:

- at worker start, and before each task, ``prune_dead`` removes the sandboxes of dead workers on
  this host: it kills their agents (left running: an agent leads its own session), removes their
  worktrees and runs ``git worktree prune``;
- while a task runs, its message's lease in the broker is renewed (``kombu``'s ``unacked_index``
  score, every quarter of the visibility timeout): a live worker's long agent run is never
  redelivered to another worker, whatever the timeout, while a dead worker's task comes back once
  the visibility timeout has passed;
- while a task runs, a cancel of its run stops it within a poll (``cancel_watch``): the agent's
  sandbox (its PID namespace) is killed and its item left unrecorded, for ``resume``.
- an ``infra_failed`` item is not run again by the worker that failed it (``retry_elsewhere``): it goes
  back to the spawn queue naming that worker, and another live spawn worker runs it when there is one.
"""
from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterable, Iterator

import redis
from celery import Celery

from ...agents import adapter as agent_adapter
from ...agents.policy import require_sandbox
from ...agents.sandbox import prune_dead
from ...envvars import env_int
from ...logs import get_logger
from ...redact import redact
from ..store import RunStore
from . import batches, work
from .app import AGGREGATE, BATCH_SUBMIT, JUDGE_BATCH, SPAWN_ITEM, create_app
from .broker_scan import PRIORITY_SEP, _decode
from .heartbeat import KEY_PREFIX
from .pools import Pool
from .redis_tls import split_tls
from .routing import agent_adapters
from .settings import FarmSettings, check_redis_url
from .store import store_for
from .tasks import until_done

log = get_logger("evalfarm.spawn")
UNACKED_INDEX = "unacked_index"  # kombu's Redis transport (Channel.unacked_index_key)
UNACKED = "unacked"

_APPS: dict[str, Celery] = {}
_LOCK = threading.Lock()


def spawn_broker_url(settings: FarmSettings) -> str:
    """``EVALFARM_SPAWN_BROKER_URL``, else the farm's broker."""
    url = os.environ.get("EVALFARM_SPAWN_BROKER_URL") or settings.broker_url
    return check_redis_url(url, "EVALFARM_SPAWN_BROKER_URL") or url


def spawn_settings(settings: FarmSettings, pool: Pool | None = None) -> FarmSettings:
    """The settings of the spawn queue's broker: its URL, the run store unchanged, and its visibility
    timeout (``EVALFARM_SPAWN_VISIBILITY_TIMEOUT``, else ``EVALFARM_VISIBILITY_TIMEOUT``, else the pool's)."""
    vt = env_int("EVALFARM_SPAWN_VISIBILITY_TIMEOUT", None, 1, 7 * 86400)
    out = replace(settings, broker_url=spawn_broker_url(settings), store_url=settings.run_store_url)
    if vt is not None:
        out = replace(out, visibility_timeout=vt, visibility_explicit=True)
    elif pool is not None and not settings.visibility_explicit:
        out = replace(out, visibility_timeout=pool.visibility_timeout)
    return out


def _spawn_app(settings: FarmSettings) -> Celery:
    url = spawn_broker_url(settings)
    with _LOCK:
        if url not in _APPS:
            _APPS[url] = create_app(spawn_settings(settings))
        return _APPS[url]


def route_spawn(settings: FarmSettings, store: RunStore, run_id: str,
                batches: Iterable[list[str]]) -> Iterator[list[str]]:
    """Send the agent items among ``batches`` to the spawn queue, one task each; yield the rest of
    each batch for the provider queue. A run without agents passes through untouched."""
    agents = agent_adapters(store.get_meta(run_id))
    if not agents:
        yield from batches
        return
    app = _spawn_app(settings)
    with app.producer_or_acquire() as producer:
        for keys in batches:
            rest = []
            for key, raw in zip(keys, store.get_items(run_id, keys)):
                if raw is not None and json.loads(raw).get("adapter") in agents:
                    app.send_task(SPAWN_ITEM, args=[run_id, [key]], queue="spawn", producer=producer)
                else:
                    rest.append(key)
            if rest:
                yield rest


def _client(url: str) -> redis.Redis:
    plain, tls = split_tls(url)
    return redis.Redis.from_url(plain, socket_connect_timeout=5, socket_timeout=10, **tls)


def spawn_keys_in_broker(settings: FarmSettings, run_id: str) -> set[str]:
    """Item keys of ``run_id`` queued on, or in a worker's hands from, the spawn queue's own broker
    (``broker_scan`` reads the main one); empty when the spawn queue shares the main broker."""
    url = spawn_broker_url(settings)
    if url == settings.broker_url:
        return set()
    r = _client(url)
    keys: set[str] = set()
    raws = list(r.lrange("spawn", 0, -1))
    for p in range(1, 10):
        raws += r.lrange(f"spawn{PRIORITY_SEP}{p}", 0, -1)
    raws += r.hvals(UNACKED)
    for raw in raws:
        m = _decode(raw)
        if m and m["args"] and m["args"][0] == run_id and len(m["args"]) > 1 and isinstance(m["args"][1], list):
            keys.update(m["args"][1])
    return keys


def spawn_keys_in_hands(r, run_id: str) -> set[str]:
    """Item keys of ``run_id`` whose spawn task is in a worker's hands in the broker ``r`` (its
    ``unacked`` hash): a cancel stops those agents, so they count as something a cancel stops."""
    keys: set[str] = set()
    for raw in r.hvals(UNACKED):
        m = _decode(raw)
        if m and m["task"] == SPAWN_ITEM and m["args"] and m["args"][0] == run_id and len(m["args"]) > 1 \
                and isinstance(m["args"][1], list):
            keys.update(m["args"][1])
    return keys


class Lease:
    """Keeps a running task's message from being redelivered: bumps its score in kombu's
    ``unacked_index`` (the delivery time the visibility timeout counts from) every ``every_s``.
    ``ZADD XX`` only touches a message still unacknowledged, so a finished task's lease cannot revive it."""

    def __init__(self, url: str, tag: str, every_s: float) -> None:
        self.url, self.tag, self.every_s = url, tag, every_s
        self.renewed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evalfarm-spawn-lease", daemon=True)

    def _run(self) -> None:
        client = _client(self.url)
        while not self._stop.wait(self.every_s):
            try:
                client.zadd(UNACKED_INDEX, {self.tag: time.time()}, xx=True)
                self.renewed += 1
            except redis.exceptions.RedisError as exc:  # the broker is away: its sweep is too
                log.warning("spawn_lease_not_renewed", tag=self.tag, error=redact(str(exc))[:200])
        client.close()

    def __enter__(self) -> "Lease":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)


def delivery_tag(request: Any) -> str | None:
    tag = getattr(request, "delivery_tag", None)
    if not tag:
        tag = (getattr(request, "properties", None) or {}).get("delivery_tag")
    return tag if isinstance(tag, str) and tag else None


@contextmanager
def leased(url: str, request: Any, visibility_timeout: int) -> Iterator[None]:
    tag = delivery_tag(request)
    if tag is None:
        log.warning("spawn_lease_without_tag", hint="the message's delivery tag is unknown: it is not renewed")
        yield
        return
    with Lease(url, tag, max(0.5, visibility_timeout / 4)):
        yield


def prune(where: str) -> list[str]:
    """Remove dead runs' sandboxes on this host (their agents killed); log what went."""
    removed = [p.name for p in prune_dead()]
    if removed:
        log.warning("spawn_pruned_dead_sandboxes", at=where, count=len(removed), dirs=removed)
    return removed


def register_spawn(app: Celery, settings: FarmSettings, spawn: FarmSettings) -> None:
    """The spawn task on a spawn worker's app; the judge and aggregate go to the main broker."""
    main = create_app(settings)
    url = settings.run_store_url

    def enqueue_aggregate(run_id: str) -> None:
        main.send_task(AGGREGATE, args=[run_id], queue="aggregate")

    def enqueue_judge(run_id: str, keys: list[str]) -> None:
        groups = batches.judge_groups(store_for(url), run_id, keys, url)  # a batched judge: its batch API
        for group in groups or []:
            main.send_task(BATCH_SUBMIT, args=[run_id, group, batches.JUDGE, 0], queue="aggregate")
        if groups is None:
            main.send_task(JUDGE_BATCH, args=[run_id, keys], queue="judge")

    @app.task(name=SPAWN_ITEM, bind=True, shared=False, acks_late=True, reject_on_worker_lost=True,
              ignore_result=True)
    def spawn_item(task: Any, run_id: str, keys: list[str], failed_on: list[dict[str, str]] | None = None) -> int:
        me = str(getattr(task.request, "hostname", None) or "")
        failed_on = [{"worker": str(f.get("worker"))[:200], "reason": str(f.get("reason"))[:300]}
                     for f in (failed_on or [])[:50] if isinstance(f, dict)]  # untrusted: from the broker
        tried = {str(f.get("worker")) for f in failed_on}
        if me in tried and live_spawn_workers((spawn.broker_url, url)) - tried:
            # this worker failed the item already and another one is alive: leave it to that one
            task.app.send_task(SPAWN_ITEM, args=[run_id, keys, failed_on], queue="spawn", countdown=HAND_ON_S)
            log.info("spawn_item_left_to_another_worker", run_id=run_id, keys=keys, worker=me)
            return 0
        with leased(spawn.broker_url, task.request, spawn.visibility_timeout):
            prune("task")
            # no batch deadline: the agent's own timeout (timeout_s) bounds the item, and the lease keeps
            # the message while it runs
            # the item's starts, counted once per delivery: a start after one without a result follows a
            # dead worker (an infra failure: retried as stated, then given up; work._worker_deaths); the
            # attempts handed on (below) started without a result too, and are not deaths
            starts = until_done(SPAWN_ITEM, run_id, lambda: work.note_starts(store_for(url), run_id, keys))
            starts = {k: n - len(failed_on) for k, n in starts.items()}

            def hand_on(out: Any) -> bool:
                return retry_elsewhere(task, run_id, out, me, failed_on)

            return until_done(SPAWN_ITEM, run_id, lambda: work.execute_batch(
                store_for(url), run_id, keys, settings.max_in_flight, enqueue_aggregate, enqueue_judge, None, url,
                settings.blob_dir, starts=starts, stop_on_cancel=True, hand_on=hand_on))


HAND_ON_S = 0.5  # the countdown of an item handed to another spawn worker


def live_spawn_workers(urls: Iterable[str]) -> set[str]:
    """Names of the spawn workers whose heartbeat is alive (``ef:worker:*`` keys, heartbeat.py), read on
    each of ``urls`` (a worker beats on the run store or on its own broker)."""
    names: set[str] = set()
    for u in dict.fromkeys(urls):
        r = _client(u)
        try:
            keys = list(r.scan_iter(match=KEY_PREFIX + "*", count=500))
            for raw in r.mget(keys) if keys else []:
                info = json.loads(raw) if raw else {}
                if isinstance(info, dict) and "spawn" in (info.get("queues") or []):
                    names.add(str(info.get("name")))
        except (redis.exceptions.RedisError, ValueError):
            continue  # no presence known there: the item is retried where it is
        finally:
            r.close()
    return names


def retry_elsewhere(task: Any, run_id: str, out: Any, me: str, failed_on: list[dict[str, str]]) -> bool:
    """An agent item's result on a spawn worker: an ``infra_failed`` one with retries left goes back to the
    spawn queue naming this worker among those that failed it (``spawn_item`` leaves it to another live
    spawn worker, or runs it here when there is none); True when handed on. Any other result, or the last
    attempt, is recorded with the worker that ran it and the attempts that failed before."""
    from ...core import failure

    if not isinstance(out.agent, dict):
        return False
    cls = failure.classify(out.to_dict())
    if cls == failure.INFRA_FAILED and len(failed_on) < failure.infra_retries():
        why = redact(failure.reason(out.to_dict()))[:300]
        task.app.send_task(SPAWN_ITEM, args=[run_id, [out.key], [*failed_on, {"worker": me, "reason": why}]],
                           queue="spawn", countdown=HAND_ON_S)
        log.warning("spawn_infra_failed_handed_on", run_id=run_id, key=out.key, worker=me, attempt=len(failed_on) + 1,
                    reason=why)
        return True
    out.agent["worker"] = me
    if failed_on:
        out.agent.update(attempts=len(failed_on) + 1, retried=[f.get("reason") for f in failed_on],
                         infra_attempts=failed_on)
    return False


def spawn_worker_app(settings: FarmSettings, pool: Pool, allow_unsandboxed: bool = False) -> Celery:
    """A spawn worker: the spawn queue's broker and visibility timeout, the spawn task, and the dead
    runs' sandboxes on this host pruned before the first task is taken. It runs agents sandboxed only
    (``isolation: none`` fails the item) unless ``allow_unsandboxed``."""
    require_sandbox(not allow_unsandboxed)
    agent_adapter.RETRY_HERE = False  # an infra failure goes back to the queue (retry_elsewhere)
    spawn = spawn_settings(settings, pool)
    app = create_app(spawn, pool)
    register_spawn(app, settings, spawn)
    prune("worker start")
    return app


COMPANION_POLL_S = 1.0


def spawn_queue_depth(r) -> int:
    """Messages waiting on the spawn queue (its priority lists included)."""
    from .broker_scan import PRIORITY_SEP as sep

    pipe = r.pipeline(transaction=False)
    for k in ["spawn"] + [f"spawn{sep}{p}" for p in range(1, 10)]:
        pipe.llen(k)
    return sum(int(n) for n in pipe.execute())


def spawn_companion(settings: FarmSettings, loglevel: str, poll_s: float = COMPANION_POLL_S,
                    allow_unsandboxed: bool = False) -> threading.Thread:
    """``worker --pool all`` serves the spawn queue too: the spawn pool has its own broker (maybe), time
    limits and visibility timeout, so it runs as a child ``worker --pool spawn``, started the first time a
    spawn task waits (a farm without agents never pays for it) and stopped with this worker (the child
    gets SIGTERM when its parent dies: PR_SET_PDEATHSIG)."""
    import atexit
    import signal
    import subprocess
    import sys

    url = spawn_broker_url(settings)
    child: list[subprocess.Popen] = []

    def pdeathsig() -> None:
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass

    def stop() -> None:
        for p in child:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()

    def loop() -> None:
        r = _client(url)
        while True:
            try:
                if (not child or child[0].poll() is not None) and spawn_queue_depth(r) > 0:
                    child[:] = [subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "worker", "--pool", "spawn",
                                                  "--broker", settings.broker_url, "--loglevel", loglevel,
                                                  *(["--allow-unsandboxed"] if allow_unsandboxed else [])],
                                                 preexec_fn=pdeathsig)]
                    log.warning("spawn_worker_started", pid=child[0].pid, why="a spawn task waits and this worker "
                                "runs --pool all (provider, judge, aggregate and spawn)")
            except redis.exceptions.RedisError:
                pass  # the broker away for a moment: the next poll tries again
            time.sleep(poll_s)

    atexit.register(stop)
    thread = threading.Thread(target=loop, name="evalfarm-spawn-companion", daemon=True)
    thread.start()
    return thread
