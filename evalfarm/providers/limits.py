"""Limits per provider endpoint and key: calls in flight, requests per minute, and a
shared pause after a 429 with Retry-After.

``LocalLimiter`` holds for one process. The farm installs a Redis-backed limiter
(farm/limits.py) so the limits and the pause hold for the whole fleet.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from ..envvars import env_int


@dataclass(frozen=True)
class Limits:
    max_in_flight: int | None = None  # across the fleet (per process in embedded mode)
    requests_per_minute: int | None = None


class Limiter(Protocol):
    def slot(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    async def pause(self, seconds: float) -> None: ...


_PROCESS_CAP: int | None = None


def set_process_cap(cap: int | None) -> None:
    """Calls in flight in this process, across every run and endpoint (``--concurrency`` for an
    in-process run; a worker's ``EVALFARM_MAX_IN_FLIGHT``). None: the environment's, default 64."""
    global _PROCESS_CAP
    _PROCESS_CAP = cap
    _LIMITERS.clear()


def process_in_flight() -> int:
    return _PROCESS_CAP or env_int("EVALFARM_MAX_IN_FLIGHT", 64, 1, 100000)


class Gcra:
    """Generic cell rate algorithm: ``rpm`` requests per minute, bursts of one second's worth."""

    def __init__(self, rpm: int) -> None:
        self.interval = 60.0 / rpm
        self.burst = max(1, rpm // 60) * self.interval
        self.tat = 0.0

    def wait_s(self) -> float:
        now = time.monotonic()
        tat = max(self.tat, now)
        allow_at = tat + self.interval - self.burst
        if allow_at > now:
            return allow_at - now
        self.tat = tat + self.interval
        return 0.0


class LocalLimiter:
    """This process only: the per-process cap, the endpoint's limits, and the 429 pause."""

    def __init__(self, limits: Limits = Limits()) -> None:
        cap = process_in_flight()
        if limits.max_in_flight:
            cap = min(cap, limits.max_in_flight)
        self.cap = cap
        self.gcra = Gcra(limits.requests_per_minute) if limits.requests_per_minute else None
        self._sems: dict[int, asyncio.Semaphore] = {}
        self._paused_until = 0.0

    def slot(self) -> "LocalSlot":
        return LocalSlot(self)

    def semaphore(self) -> asyncio.Semaphore:
        """This loop's semaphore (one per event loop: a worker's task threads share one loop)."""
        key = id(asyncio.get_running_loop())
        sem = self._sems.get(key)
        if sem is None:
            sem = self._sems[key] = asyncio.Semaphore(self.cap)
        return sem

    async def wait_turn(self) -> None:
        """Wait out the 429 pause and the requests-per-minute rate."""
        while True:
            wait = self._paused_until - time.monotonic()
            if wait <= 0 and self.gcra is not None:
                wait = self.gcra.wait_s()
            if wait <= 0:
                return
            await asyncio.sleep(wait)

    async def pause(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)


class LocalSlot:
    """``LocalLimiter.slot()``: a plain async context manager, not a generator-based one, as it is
    taken once per provider call."""

    __slots__ = ("limiter", "sem")

    def __init__(self, limiter: LocalLimiter) -> None:
        self.limiter = limiter
        self.sem: asyncio.Semaphore | None = None

    async def __aenter__(self) -> None:
        limiter = self.limiter
        sem = limiter.semaphore()
        await sem.acquire()
        try:
            if limiter.gcra is not None or limiter._paused_until > time.monotonic():
                await limiter.wait_turn()
        except BaseException:
            sem.release()
            raise
        self.sem = sem

    async def __aexit__(self, *exc: object) -> None:
        if self.sem is not None:
            self.sem.release()
            self.sem = None


def endpoint_id(base_url: str, api_key_env: str) -> str:
    """Identifies (endpoint, key) without revealing the key: a short hash of both (asked twice per call:
    remembered per endpoint and key, as the key may change between runs of a long-lived worker)."""
    key = os.environ.get(api_key_env, "")
    return _endpoint_id(base_url, key)


@functools.lru_cache(maxsize=256)
def _endpoint_id(base_url: str, key: str) -> str:
    return hashlib.sha256(f"{base_url.rstrip('/')}\0{key}".encode()).hexdigest()[:16]


_FACTORY: Callable[[str, Limits], Limiter] | None = None
_LIMITERS: dict[str, Limiter] = {}


def set_limiter_factory(factory: Callable[[str, Limits], Limiter] | None) -> None:
    """The farm installs a fleet-wide factory; None restores per-process limits."""
    global _FACTORY
    _FACTORY = factory
    _LIMITERS.clear()


def limiter_for(base_url: str, api_key_env: str, limits: Limits = Limits()) -> Limiter:
    """One limiter per (endpoint, key, limits): a long-lived worker applies each run's own limits.
    The fleet-wide pause key is per (endpoint, key) whatever the limits."""
    eid = endpoint_id(base_url, api_key_env)
    cache_key = f"{eid}:{limits.max_in_flight}:{limits.requests_per_minute}"
    lim = _LIMITERS.get(cache_key)
    if lim is None:
        lim = _FACTORY(eid, limits) if _FACTORY else LocalLimiter(limits)
        _LIMITERS[cache_key] = lim
    return lim
