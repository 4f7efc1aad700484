"""The reference: a bare Celery chord of no-op tasks on Redis (one task per item)."""
from __future__ import annotations

import os

from celery import Celery

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
app = Celery("bare", broker=URL, backend=URL)
app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json",
                worker_prefetch_multiplier=4, broker_connection_retry_on_startup=True)


@app.task(name="bare.noop")
def noop(i: int) -> int:
    return i


@app.task(name="bare.done")
def done(results: list) -> int:
    return len(results)
