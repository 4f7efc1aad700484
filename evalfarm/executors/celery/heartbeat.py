"""Worker presence: each worker keeps ``ef:worker:<name>`` alive in the farm's Redis.

The value is JSON ``{"name", "host", "pid", "queues", "concurrency", "started_at", "ts"}``
(``ts``: Unix seconds of the last beat), written every ``interval_s`` with a TTL of ``ttl_s``:
a worker that dies (even by SIGKILL) disappears from the farm page within ``ttl_s``; a clean
stop deletes its key at once. The dashboard only reads these keys (``SCAN ef:worker:*``).

Two ways in: ``start(url, name, ...)`` from the worker command, or, until the worker calls it,
``EVALFARM_PLUGINS=evalfarm.executors.celery.heartbeat``: importing this module in a Celery worker
connects ``worker_ready``/``worker_shutdown`` so every worker beats with no code change.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, Sequence

from ...envvars import env_float

KEY_PREFIX = "ef:worker:"
INTERVAL_S = 10.0
TTL_S = 30


def key_for(name: str) -> str:
    return KEY_PREFIX + name


class Heartbeat:
    """A daemon thread that refreshes the worker's key; ``stop()`` deletes it."""

    def __init__(self, url: str, name: str, queues: Sequence[str] = (), concurrency: int = 0,
                 interval_s: float = INTERVAL_S, ttl_s: int = TTL_S) -> None:
        from .redis_tls import fail_fast_client as redis_client

        if ttl_s <= interval_s:
            raise ValueError("the TTL must outlive the interval, or a live worker would blink out")
        self.r = redis_client(url)
        self.key, self.interval_s, self.ttl_s = key_for(name), interval_s, int(ttl_s)
        self.info: dict[str, Any] = {"name": name, "host": socket.gethostname(), "pid": os.getpid(),
                                     "queues": list(queues), "concurrency": concurrency,
                                     "started_at": time.time()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evalfarm-heartbeat", daemon=True)

    def beat(self) -> None:
        self.r.set(self.key, json.dumps({**self.info, "ts": time.time()}), ex=self.ttl_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - Redis away for a moment: the next beat retries
                pass
            self._stop.wait(self.interval_s)

    def start(self) -> "Heartbeat":
        self.beat()  # the first beat is synchronous: a bad URL fails here, loudly
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.r.delete(self.key)
        except Exception:  # noqa: BLE001 - the TTL removes it anyway
            pass


def start(url: str, name: str, queues: Sequence[str] = (), concurrency: int = 0,
          interval_s: float = INTERVAL_S, ttl_s: int = TTL_S) -> Heartbeat:
    return Heartbeat(url, name, queues, concurrency, interval_s, ttl_s).start()


# --- opt-in Celery hook (EVALFARM_PLUGINS=evalfarm.executors.celery.heartbeat) --------------------------------
_RUNNING: list[Heartbeat] = []


def _on_ready(sender=None, **_: Any) -> None:
    consumer = sender
    app = getattr(consumer, "app", None)
    url = os.environ.get("EVALFARM_STORE_URL") or os.environ.get("EVALFARM_BROKER_URL") \
        or (app.conf.broker_url if app is not None else None)
    if not url or not str(url).startswith(("redis://", "rediss://", "unix://")):
        return
    try:
        queues = sorted(q.name for q in consumer.task_consumer.queues)
    except AttributeError:
        queues = []
    pool = getattr(getattr(consumer, "controller", None), "concurrency", 0) or 0
    interval = env_float("EVALFARM_HEARTBEAT_S", INTERVAL_S, 0.1, 3600)
    try:
        _RUNNING.append(start(url, consumer.hostname, queues, int(pool), interval, max(int(interval * 3), 3)))
    except Exception as exc:  # noqa: BLE001 - presence is not worth a worker: warn and work on
        import logging

        from ...redact import redact
        logging.getLogger("evalfarm.heartbeat").warning("heartbeat disabled: %s", redact(str(exc)))


def _on_shutdown(**_: Any) -> None:
    while _RUNNING:
        _RUNNING.pop().stop()


try:
    from celery import signals as _signals

    _signals.worker_ready.connect(_on_ready, weak=False)
    _signals.worker_shutdown.connect(_on_shutdown, weak=False)
except ImportError:  # pragma: no cover - celery is a dependency
    pass
