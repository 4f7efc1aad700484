"""Celery tasks: thin shells over ``work``; registered by name on a given app."""
from __future__ import annotations

import threading

from celery import Celery

from ..errors import FarmError
from . import work
from .app import AGGREGATE, JUDGE_BATCH, RUN_BATCH
from .settings import FarmSettings
from .store import MemoryStore, RedisStore, RunStore

_STORES: dict[str, RunStore] = {}
_LOCK = threading.Lock()
EMBEDDED_STORE = MemoryStore()


def store_for(settings: FarmSettings) -> RunStore:
    """One store client per process and URL; the embedded farm shares a MemoryStore."""
    url = settings.effective_store_url
    if url is None:
        if settings.embedded:
            return EMBEDDED_STORE
        raise FarmError("the run store needs Redis: with a non-Redis broker set EVALFARM_STORE_URL=redis://...")
    with _LOCK:
        if url not in _STORES:
            _STORES[url] = RedisStore(url)
        return _STORES[url]


def register(app: Celery, settings: FarmSettings) -> None:
    url = settings.effective_store_url
    if not settings.embedded and url:
        from .limits import install

        install(url)  # provider limits and 429 pauses hold for the whole fleet
    def enqueue_aggregate(run_id: str) -> None:
        app.tasks[AGGREGATE].apply_async(args=[run_id], queue="aggregate")

    def enqueue_judge(run_id: str, keys: list[str]) -> None:
        app.tasks[JUDGE_BATCH].apply_async(args=[run_id, keys], queue="judge")

    @app.task(name=RUN_BATCH, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def run_batch(run_id: str, keys: list[str]) -> int:
        return work.execute_batch(store_for(settings), run_id, keys, settings.max_in_flight,
                                  enqueue_aggregate, enqueue_judge, settings.time_limit_s)

    @app.task(name=JUDGE_BATCH, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def judge_batch(run_id: str, keys: list[str]) -> int:
        return work.execute_judge(store_for(settings), run_id, keys, settings.max_in_flight, enqueue_aggregate,
                                  settings.time_limit_s)

    @app.task(name=AGGREGATE, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def aggregate(run_id: str) -> bool:
        return work.finalize(store_for(settings), run_id) is not None
