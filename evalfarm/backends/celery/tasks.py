"""Celery tasks: thin shells over ``work`` and ``finalize``, registered by name on a worker's app."""
from __future__ import annotations

from celery import Celery

from ..finalize import finalize
from . import work
from .app import AGGREGATE, JUDGE_BATCH, RUN_BATCH, create_app
from .limits import install
from .pools import Pool
from .quota import install as install_quota
from .settings import FarmSettings
from .store import store_for

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
        app.send_task(JUDGE_BATCH, args=[run_id, keys], queue="judge")

    @app.task(name=RUN_BATCH, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def run_batch(run_id: str, keys: list[str]) -> int:
        return work.execute_batch(store_for(settings.run_store_url), run_id, keys, settings.max_in_flight,
                                  enqueue_aggregate, enqueue_judge, settings.time_limit_s, url)

    @app.task(name=JUDGE_BATCH, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def judge_batch(run_id: str, keys: list[str]) -> int:
        return work.execute_judge(store_for(settings.run_store_url), run_id, keys, settings.max_in_flight, enqueue_aggregate,
                                  settings.time_limit_s, url)

    @app.task(name=AGGREGATE, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def aggregate(run_id: str) -> bool:
        return finalize(store_for(settings.run_store_url), run_id)
