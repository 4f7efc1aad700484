"""The response cache in Redis, shared by every worker (``ef:cache:<request hash>``).

A Redis error on a read is an ``InfrastructureError``: the item is retried later, never
recorded as a provider failure. A failed write comes after a real (paid) answer, so it only
logs: the answer is kept, the cache merely misses it next time.
"""
from __future__ import annotations

import json
from typing import Any

import redis

from ...errors import InfrastructureError
from ...logs import get_logger
from .redis_tls import async_client

log = get_logger("evalfarm.cache")


class RedisCache:
    def __init__(self, url: str, ttl_s: int = 30 * 24 * 3600) -> None:
        self.url, self.ttl_s = url, ttl_s

    def _redis(self):
        return async_client(self.url)

    async def get(self, key: str) -> dict[str, Any] | None:
        try:
            raw = await self._redis().get(f"ef:cache:{key}")
        except (redis.exceptions.RedisError, OSError) as exc:
            raise InfrastructureError(f"the response cache's Redis failed: {type(exc).__name__}: {exc}") from exc
        return json.loads(raw) if raw else None

    async def put(self, key: str, value: dict[str, Any]) -> None:
        try:
            await self._redis().set(f"ef:cache:{key}", json.dumps(value), ex=self.ttl_s)
        except (redis.exceptions.RedisError, OSError) as exc:
            log.warning("cache_write_failed", error=f"{type(exc).__name__}: {exc}")
