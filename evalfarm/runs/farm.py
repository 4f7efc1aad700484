"""The farm, for callers above ``runs/`` (the command line's farm commands, the dashboard): connect to
it (status, wait, cancel, resume), start a worker, and read what it is doing. With ``submit``, the one
door into the Celery executor: nothing above this layer imports it.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any

from ..errors import EvalfarmError

GC_YOUNG = 50_000  # allocations between collections of the youngest generation in a worker (700 is Python's)


def connect(broker: str | None):
    """The farm's coordinator for ``broker`` (one clear line when there is none or it is unreachable)."""
    from ..executors.celery.coordinator import CeleryBackend
    from ..executors.celery.settings import FarmSettings

    if not broker:
        raise EvalfarmError("this command needs the farm's Redis: pass --broker redis://HOST:6379/0 "
                            "or set EVALFARM_BROKER_URL")
    return CeleryBackend(FarmSettings.from_env(broker_url=broker))


def attach(backend, run_id: str):
    """A handle on a run another process submitted (``wait``, ``resume``)."""
    from .submit import RunHandle

    return RunHandle(backend, run_id)


@dataclass(frozen=True)
class Layout:
    """Where the farm keeps what a reader shows: queue names per pool, the broker's priority separator,
    the run store's index of runs, its cost unit, the workers' heartbeat keys."""

    queues: Any
    priority_sep: str
    runs_index: str
    cost_scale: int
    heartbeat_prefix: str
    settle_left: Any  # (Redis uptime s, run age s) -> s before the run's counter records are all back


def layout() -> Layout:
    from ..executors.celery.broker_scan import PRIORITY_SEP
    from ..executors.celery.heartbeat import KEY_PREFIX
    from ..executors.celery.messages import QUEUES
    from ..executors.celery.store import RUNS_INDEX, settle_left
    from ..executors.store import COST_SCALE

    return Layout(QUEUES, PRIORITY_SEP, RUNS_INDEX, COST_SCALE, KEY_PREFIX, settle_left)


def fold_tally(counts: dict[str, int], tally: dict[bytes, bytes]) -> dict[str, int]:
    """A run's counts with the workers' counter records folded in (never lower after a restore)."""
    from ..executors.celery.store import fold_tally as fold

    return fold(counts, tally)


def redis_client(url: str):
    """A redis-py client for the farm's Redis that fails fast (2 s to connect, 3 s a command), with
    the farm's TLS settings: a reader (a page, a probe) never hangs."""
    from ..executors.celery.redis_tls import fail_fast_client

    return fail_fast_client(url)


def check_redis_url(url: str | None, source: str) -> str | None:
    """``redis://host:6379/0``: the database must be a number (kombu would quietly use 0)."""
    from ..executors.celery.settings import check_redis_url as check

    return check(url, source)


def start_worker(pool: str, *, concurrency: int | None, broker: str | None, loglevel: str,
                 metrics_port: int | None, events: bool, allow_unsandboxed: bool = False) -> None:
    """Run a Celery worker on one pool's queues until it is stopped: the worker's settings checked
    first (a bad broker or time limit is one line at start, not a traceback later), its heartbeat and
    optional Prometheus endpoint on, the blob dir handed to it from the state dir's layout. A spawn
    worker runs agents sandboxed only unless ``allow_unsandboxed`` (``--allow-unsandboxed``)."""

    from ..envvars import env_float
    from ..executors.celery import heartbeat  # noqa: F401  (connects the worker's heartbeat to Celery's signals)
    from ..executors.celery.heartbeat import INTERVAL_S
    from ..executors.celery.pools import POOLS
    from ..executors.celery.preflight import check_worker_redis
    from ..executors.celery.settings import FarmSettings
    from ..executors.celery.tasks import worker_app
    from ..executors.finalize import run_ttl_s
    from .state import StateDir

    if not broker:
        raise EvalfarmError("a worker needs a broker: pass --broker redis://HOST:6379/0 "
                            "or set EVALFARM_BROKER_URL")
    spec = POOLS[pool]
    limit = env_float("EVALFARM_TASK_TIME_LIMIT", spec.soft_time_limit, 1, 7 * 86400)
    run_ttl_s()  # bad settings stop the worker at its start, not at a run's end
    env_float("EVALFARM_HEARTBEAT_S", INTERVAL_S, 0.1, 3600)
    blob_dir = str(StateDir.of().blobs.resolve())
    settings = FarmSettings.from_env(broker_url=broker, time_limit_s=limit, blob_dir=blob_dir)
    broker_of_queues = settings.broker_url
    if pool == "spawn":  # its own broker (EVALFARM_SPAWN_BROKER_URL); dead runs' sandboxes pruned first
        from ..executors.celery.spawn import spawn_broker_url, spawn_worker_app

        broker_of_queues = spawn_broker_url(settings)
    check_worker_redis(settings, broker_of_queues)
    if metrics_port is not None:
        from ..executors.celery import metrics
        from ..engine import observe

        try:
            metrics.start_metrics_server(metrics_port)
        except OSError as exc:
            raise EvalfarmError(f"--metrics-port {metrics_port}: cannot listen ({exc.strerror}); pick another port")
        observe.install(metrics.PrometheusObserver())
        metrics.sample_queues(broker_of_queues, {spec.name: spec.queues})
    if pool == "spawn":
        app = spawn_worker_app(settings, spec, allow_unsandboxed)
    else:
        app = worker_app(settings, pool=spec)
    if pool == "all":  # 'all' means all: spawn in a child 'worker --pool spawn' when a spawn task waits
        from ..executors.celery.spawn import spawn_companion

        spawn_companion(settings, loglevel, allow_unsandboxed=allow_unsandboxed)
    app.conf.worker_send_task_events = events
    # A collection of the youngest objects every 50,000 allocations, not 700: a busy worker allocates a
    # few hundred objects per provider call, and at 0 ms latency its CPU is the run's pace (the farm's
    # 1,000-item run: 20-30 ms less worker CPU of ~0.27 s, bench/RESULTS.md). Cycles are still collected.
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    # heartbeats on (Flower and `celery events` see the worker alive); no gossip (every worker would
    # consume every other worker's events) and no mingle (a start-up round trip to the others)
    app.worker_main(["worker", "-Q", ",".join(spec.queues), "-P", "threads",
                     "-c", str(concurrency or spec.concurrency), "--loglevel", loglevel,
                     # a name of its own (pid): two workers of one pool on one host beat apart, and a spawn
                     # task's infra retry can tell the worker that failed it from another (spawn.py)
                     "-n", f"{pool}-{os.getpid()}@%h", "--without-gossip", "--without-mingle"])
