"""The response cache in Redis, shared by every worker (``ef:cache:<request hash>``)."""
from __future__ import annotations

import json
from typing import Any

from .redis_tls import async_client


class RedisCache:
    def __init__(self, url: str, ttl_s: int = 30 * 24 * 3600) -> None:
        self.url, self.ttl_s = url, ttl_s

    def _redis(self):
        return async_client(self.url)

    async def get(self, key: str) -> dict[str, Any] | None:
        raw = await self._redis().get(f"ef:cache:{key}")
        return json.loads(raw) if raw else None

    async def put(self, key: str, value: dict[str, Any]) -> None:
        await self._redis().set(f"ef:cache:{key}", json.dumps(value), ex=self.ttl_s)
