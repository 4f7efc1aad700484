"""Farm settings from the environment (documented in the README)."""
from __future__ import annotations

import os
from dataclasses import dataclass

EMBEDDED = "embedded"


@dataclass(frozen=True)
class FarmSettings:
    broker_url: str | None = None  # None: the embedded farm, in this process
    result_backend: str | None = None  # optional; evalfarm never waits on Celery results
    store_url: str | None = None  # the run store; defaults to the broker when it is Redis
    batch_size: int | None = None  # items per task; None picks by run size
    max_in_flight: int = 64  # calls in flight per worker process
    visibility_timeout: int = 900  # seconds before an unacked task is redelivered
    visibility_explicit: bool = False  # set from the environment: overrides the pool's

    @property
    def embedded(self) -> bool:
        return not self.broker_url

    @property
    def effective_store_url(self) -> str | None:
        if self.store_url:
            return self.store_url
        if self.broker_url and self.broker_url.startswith(("redis://", "rediss://", "unix://")):
            return self.broker_url
        return None

    @classmethod
    def from_env(cls, broker_url: str | None = None, **overrides) -> "FarmSettings":
        env = os.environ
        batch = env.get("EVALFARM_BATCH_SIZE")
        values = dict(
            broker_url=broker_url or env.get("EVALFARM_BROKER_URL") or None,
            result_backend=env.get("EVALFARM_RESULT_BACKEND") or None,
            store_url=env.get("EVALFARM_STORE_URL") or None,
            batch_size=int(batch) if batch else None,
            max_in_flight=int(env.get("EVALFARM_MAX_IN_FLIGHT", "64")),
            visibility_timeout=int(env.get("EVALFARM_VISIBILITY_TIMEOUT", "900")),
            visibility_explicit="EVALFARM_VISIBILITY_TIMEOUT" in env,
        )
        values.update(overrides)
        return cls(**values)


def pick_batch_size(total: int, configured: int | None) -> int:
    """Big enough to amortise a task round trip (~2.7 ms here), small enough to spread work:
    aim for >= 16 tasks, never more than 100 items in one."""
    if configured:
        return max(1, configured)
    return max(1, min(100, -(-total // 16)))
