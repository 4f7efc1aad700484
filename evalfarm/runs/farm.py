"""The farm, for callers above ``runs/`` (the command line's farm commands, the dashboard): connect to
it (status, wait, cancel, resume), start a worker, and read what it is doing. With ``submit``, the one
door into the Celery executor: nothing above this layer imports it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import EvalfarmError


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


def layout() -> Layout:
    from ..executors.celery.app import QUEUES
    from ..executors.celery.broker_scan import PRIORITY_SEP
    from ..executors.celery.heartbeat import KEY_PREFIX
    from ..executors.celery.store import RUNS_INDEX
    from ..executors.store import COST_SCALE

    return Layout(QUEUES, PRIORITY_SEP, RUNS_INDEX, COST_SCALE, KEY_PREFIX)


def redis_client(url: str):
    """A redis-py client for the farm's Redis that fails fast (2 s to connect, 3 s a command), with
    the farm's TLS settings: a reader (a page, a probe) never hangs."""
    from ..executors.celery.redis_tls import fail_fast_client

    return fail_fast_client(url)


def check_redis_url(url: str | None, source: str) -> str | None:
    """``redis://host:6379/0``: the database must be a number (kombu would quietly use 0)."""
    from ..executors.celery.settings import check_redis_url as check

    return check(url, source)
