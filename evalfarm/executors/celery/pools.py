"""Worker pools: which queues a pool consumes and the settings it runs with.

These definitions are the single source of truth: ``evalfarm worker --pool X``
applies them, and workers/ (container image), docker-compose.yml and deploy/
start one worker per pool with them.

Redis redelivers an unacknowledged task after the transport's visibility
timeout, and any worker restores any queue's overdue messages, so a pool whose
tasks may run longer than the others (spawn) must live on its own broker
database (``EVALFARM_SPAWN_BROKER_URL``), with a visibility timeout above its
time limit.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pool:
    name: str
    queues: tuple[str, ...]
    concurrency: int  # tasks at once (threads sharing one event loop)
    prefetch_multiplier: int
    soft_time_limit: int  # seconds; the task gets SoftTimeLimitExceeded
    time_limit: int  # seconds; the task is killed
    visibility_timeout: int  # seconds before an unacked task is redelivered


POOLS: dict[str, Pool] = {
    "provider": Pool("provider", ("provider",), 8, 1, 600, 660, 900),
    "judge": Pool("judge", ("judge",), 8, 1, 600, 660, 900),
    "aggregate": Pool("aggregate", ("aggregate",), 2, 1, 1200, 1260, 1500),
    "spawn": Pool("spawn", ("spawn",), 2, 1, 1800, 1860, 2400),
    "all": Pool("all", ("provider", "judge", "aggregate"), 8, 1, 600, 660, 900),
}
