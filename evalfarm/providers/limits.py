"""Limits per provider endpoint and key: calls in flight and a shared pause after a 429.

``LocalLimiter`` holds for one process. The farm swaps in a Redis-backed limiter
so the limit and the pause hold for the whole fleet (see farm/limits.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from typing import AsyncIterator, Callable, Protocol


class Limiter(Protocol):
    def slot(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    async def pause(self, seconds: float) -> None: ...


class LocalLimiter:
    """At most ``max_in_flight`` calls at once in this process; a pause holds every caller."""

    def __init__(self, max_in_flight: int = 64) -> None:
        self.max_in_flight = max_in_flight
        self._sems: dict[int, asyncio.Semaphore] = {}
        self._paused_until = 0.0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        sem = self._sems.setdefault(id(loop), asyncio.Semaphore(self.max_in_flight))
        async with sem:
            wait = self._paused_until - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            yield

    async def pause(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)


def endpoint_id(base_url: str, api_key_env: str) -> str:
    """Identifies (endpoint, key) without revealing the key: a short hash of both."""
    key = os.environ.get(api_key_env, "")
    return hashlib.sha256(f"{base_url.rstrip('/')}\0{key}".encode()).hexdigest()[:16]


_FACTORY: Callable[[str], Limiter] | None = None
_LIMITERS: dict[str, Limiter] = {}


def set_limiter_factory(factory: Callable[[str], Limiter] | None) -> None:
    """The farm installs a fleet-wide factory; None restores per-process limits."""
    global _FACTORY
    _FACTORY = factory
    _LIMITERS.clear()


def limiter_for(base_url: str, api_key_env: str) -> Limiter:
    eid = endpoint_id(base_url, api_key_env)
    lim = _LIMITERS.get(eid)
    if lim is None:
        lim = _FACTORY(eid) if _FACTORY else LocalLimiter(int(os.environ.get("EVALFARM_MAX_IN_FLIGHT", "64")))
        _LIMITERS[eid] = lim
    return lim
