"""A worker checks its Redis before Celery starts: one line and exit 2 for a wrong URL, a wrong
password or a Redis that is not up, instead of Celery's banner followed by ``Cannot connect ...
Trying again`` for ever. Once running, a worker does ride out a lost broker (a restart, a partition):
only the start is strict."""
from __future__ import annotations

import sys

from ...errors import FarmError
from ...redact import redact
from .settings import FarmSettings
from .store import probe


def check_worker_redis(settings: FarmSettings, broker_of_queues: str) -> None:
    """Reach the broker the worker consumes (a spawn worker's: EVALFARM_SPAWN_BROKER_URL) and the run
    store it writes, each within the connect timeout (EVALFARM_CONNECT_TIMEOUT)."""
    source = "--broker / EVALFARM_BROKER_URL"
    if broker_of_queues != settings.broker_url:
        source = "EVALFARM_SPAWN_BROKER_URL"
    targets = []
    if broker_of_queues.startswith(("redis://", "rediss://", "unix://")):
        targets.append(("the broker", broker_of_queues, source))
    store = settings.run_store_url
    if store != broker_of_queues:
        targets.append(("the run store", store, "EVALFARM_STORE_URL" if settings.store_url else
                        "--broker / EVALFARM_BROKER_URL"))
    for what, url, where in targets:
        print(f"evalfarm: worker: connecting to {what} at {redact(url)} ...", file=sys.stderr, flush=True)
        try:
            probe(url, settings.connect_timeout_s)
        except Exception as exc:  # noqa: BLE001 - whatever it is, the worker cannot work: say it in one line
            raise FarmError(f"worker: cannot reach {what} at {redact(url)}: {redact(str(exc)).rstrip('.')}; "
                            f"is Redis running, and are the URL and password right? ({where})") from None
