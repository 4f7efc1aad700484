"""Celery tasks: thin shells over ``work`` and ``finalize``, registered by name on a worker's app.

An infrastructure failure (the run store, the broker or a fleet limiter: Redis down, full or
unreachable) is never an item's outcome. The task keeps its message (acknowledged late, so
nothing is lost if the worker dies meanwhile) and runs again with backoff, logging one clear
line per attempt, until Redis answers: the work is idempotent (finished items are skipped).
Celery's own ``retry`` would not do: it republishes through the broker that just failed, and
drops the message when that publish fails.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from ...errors import InfrastructureError
from ...logs import get_logger
from ...redact import redact
from ..finalize import finalize
from . import batches, work
from .app import AGGREGATE, BATCH_POLL, BATCH_SUBMIT, JUDGE_BATCH, RUN_BATCH, create_app
from .limits import install
from .pools import Pool
from .quota import install as install_quota
from .settings import FarmSettings
from .store import store_for

log = get_logger("evalfarm.tasks")
T = TypeVar("T")
INFRA_ERRORS = (InfrastructureError, redis.exceptions.RedisError, OperationalError)
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 10.0  # a task notices a recovered Redis within 10 s


def what_to_do(exc: BaseException) -> str:
    text = str(exc)
    if "OOM" in text or "maxmemory" in text or type(exc).__name__ == "OutOfMemoryError":
        return ("Redis is out of memory (maxmemory with noeviction): raise maxmemory (redis-cli CONFIG SET "
                "maxmemory ...) or free memory; this task waits and runs again")
    if "READONLY" in text or "LOADING" in text:
        return "Redis is read-only or still loading its data; this task waits and runs again"
    return "Redis (the run store or the broker) cannot be reached; this task waits and runs again until it answers"


def until_done(task: str, run_id: str, fn: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``fn`` until it gets past infrastructure errors (backoff 1, 2, 4, 8, 10, 10 ... s)."""
    delay, attempt = RETRY_FIRST_S, 0
    while True:
        try:
            result = fn()
        except INFRA_ERRORS as exc:
            attempt += 1
            log.warning("infrastructure_error_retrying", task=task, run_id=run_id, attempt=attempt,
                        retry_in_s=delay, error=f"{type(exc).__name__}: {redact(str(exc))[:300]}",
                        what_to_do=what_to_do(exc))
            sleep(delay)
            delay = min(delay * 2, RETRY_CAP_S)
            continue
        if attempt:
            log.warning("infrastructure_recovered", task=task, run_id=run_id, attempts=attempt + 1)
        return result


def worker_app(settings: FarmSettings, pool: Pool | None = None) -> Celery:
    """The app a worker runs: the farm's settings, the pool's, and the tasks."""
    app = create_app(settings, pool)
    register(app, settings)
    return app


def register(app: Celery, settings: FarmSettings) -> None:
    url = settings.run_store_url
    install(url)  # provider limits and 429 pauses hold for the whole fleet
    install_quota(url)  # so does an exhausted quota (429 insufficient_quota)

    def enqueue_aggregate(run_id: str) -> None:
        app.send_task(AGGREGATE, args=[run_id], queue="aggregate")

    def enqueue_judge(run_id: str, keys: list[str]) -> None:
        """A batched judge's items go to its batch API (a ``batch_submit`` of adapter "judge"), else live."""
        groups = batches.judge_groups(store_for(url), run_id, keys, url)
        for group in groups or []:
            app.send_task(BATCH_SUBMIT, args=[run_id, group, batches.JUDGE, 0], queue="aggregate")
        if groups is not None:
            return
        app.send_task(JUDGE_BATCH, args=[run_id, keys], queue="judge")

    @app.task(name=RUN_BATCH, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def run_batch(run_id: str, keys: list[str], seg: int | None = None) -> int:
        if seg is not None:  # an archived run's batch: segment ``seg`` of its plan on the archive
            return until_done(RUN_BATCH, run_id, lambda: work.execute_segment(
                store_for(url), run_id, int(seg), settings.max_in_flight, enqueue_aggregate, settings.time_limit_s,
                url, settings.blob_dir))
        return until_done(RUN_BATCH, run_id, lambda: work.execute_batch(
            store_for(url), run_id, keys, settings.max_in_flight, enqueue_aggregate, enqueue_judge,
            settings.time_limit_s, url, settings.blob_dir))

    @app.task(name=JUDGE_BATCH, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def judge_batch(run_id: str, keys: list[str]) -> int:
        return until_done(JUDGE_BATCH, run_id, lambda: work.execute_judge(
            store_for(url), run_id, keys, settings.max_in_flight, enqueue_aggregate, settings.time_limit_s, url,
            settings.blob_dir))

    def schedule_poll(run_id: str, batch_id: str, attempt: int, delay_s: float) -> None:
        app.send_task(BATCH_POLL, args=[run_id, batch_id, attempt], queue="aggregate", countdown=delay_s)

    @app.task(name=BATCH_SUBMIT, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def batch_submit(run_id: str, keys: list[str], adapter: str, attempt: int = 0) -> int:
        return len(until_done(BATCH_SUBMIT, run_id, lambda: batches.submit(
            store_for(url), run_id, keys, adapter, attempt, url,
            lambda bid, n, d: schedule_poll(run_id, bid, n, d),
            lambda live: app.send_task(JUDGE_BATCH, args=[run_id, live], queue="judge") if adapter == batches.JUDGE
            else app.send_task(RUN_BATCH, args=[run_id, live], queue="provider"))))

    @app.task(name=BATCH_POLL, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def batch_poll(run_id: str, batch_id: str, attempt: int = 0) -> str:
        return until_done(BATCH_POLL, run_id, lambda: batches.poll(
            store_for(url), run_id, batch_id, attempt, url, lambda bid, n, d: schedule_poll(run_id, bid, n, d),
            lambda keys: app.send_task(RUN_BATCH, args=[run_id, keys], queue="provider"),
            lambda keys, adapter, n: app.send_task(BATCH_SUBMIT, args=[run_id, keys, adapter, n], queue="aggregate"),
            enqueue_judge, enqueue_aggregate))

    @app.task(name=AGGREGATE, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def aggregate(run_id: str) -> bool:
        def build() -> bool:
            store = store_for(url)
            built = finalize(store, run_id)
            if built:
                store.wake(run_id)  # the waiting coordinator reads the report now, not at its next poll
            return built

        return until_done(AGGREGATE, run_id, build)
