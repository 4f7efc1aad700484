"""Fleet-wide provider limits in Redis: calls in flight, requests per minute, 429 pauses.

Calls in flight (an endpoint's ``max_in_flight``, a run's ``--concurrency``) are leases
(leases.py): each worker process holds a count of slots under one lease, renewed by one task per
process, so a call takes a slot without a Redis round trip and a dead or stopped worker's slots
return within the lease (10 s). The rate (GCRA) is one Lua call per request through the worker's
bounded connection pool (redis_tls.py: a call waits for a connection, it never fails for want of
one). A 429 with Retry-After sets the pause key for the whole fleet; a background task on the
worker's loop reads it every 200 ms while calls are being made, and a Redis outage there only logs
(calls go on with this worker's own pause state). With no limits configured a call never touches
Redis. Where Redis is on the call path (a rate, or a new slot while none is held), a Redis error
is an ``InfrastructureError``: the item stays unfinished and its batch is retried, it never
becomes the item's outcome.
"""
from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import AsyncIterator

import redis

from ...errors import InfrastructureError
from ...logs import get_logger
from ...providers.limits import Limits, LocalLimiter, set_limiter_factory
from .leases import keeper_for
from .redis_tls import async_client

log = get_logger("evalfarm.limits")
POLL_S = 0.2  # how often the fleet-wide pause is read while calls are made
POLL_IDLE_S = 5.0  # the reader stops after this long without a call (and starts again with the next)
POLL_TIMEOUT_S = 2.0  # a read that hangs (a partition) is given up; the next one tries again

_RATE = """
-- KEYS: gcra (tat ms) ; ARGV: interval_ms, burst_ms ; returns ms to wait, 0 = the request may go
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allow_at = tat + interval - tonumber(ARGV[2])
if allow_at > now then return allow_at - now end
redis.call('SET', KEYS[1], tat + interval, 'PX', math.floor(tat + interval - now + 60000))
return 0
"""

_PAUSE = """
-- KEYS: pause ; ARGV: ms
local ms = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < ms then redis.call('SET', KEYS[1], '1', 'PX', ms) end
return 1
"""


class RedisLimiter:
    """Fleet-wide limits for one (endpoint, key); the process cap still applies locally."""

    def __init__(self, url: str, eid: str, limits: Limits) -> None:
        self.url, self.eid, self.limits = url, eid, limits
        self.keys = [f"ef:lim:{eid}:pause", f"ef:lim:{eid}:gcra"]
        rpm = limits.requests_per_minute or 0
        self.interval_ms = 60000.0 / rpm if rpm else 0
        self.burst_ms = max(1, rpm // 60) * self.interval_ms if rpm else 0
        self.enforced = bool(limits.max_in_flight or rpm)
        self.local = LocalLimiter(Limits())  # the per-process cap
        self._paused_until = 0.0
        self._last_call = 0.0
        self._pollers: dict[int, asyncio.Task] = {}  # per event loop
        self._first_read: dict[int, asyncio.Future] = {}  # per event loop: done at the reader's first answer

    def _redis(self):
        return async_client(self.url)

    def _infra(self, exc: BaseException, what: str) -> InfrastructureError:
        return InfrastructureError(f"the fleet limiter's Redis failed ({what}): {type(exc).__name__}: {exc}")

    def _watch_pause(self) -> None:
        """Start the background pause reader on this loop unless it runs (no I/O here)."""
        self._last_call = time.monotonic()
        loop = asyncio.get_running_loop()
        task = self._pollers.get(id(loop))
        if task is None or task.done():
            self._first_read[id(loop)] = loop.create_future()
            self._pollers[id(loop)] = loop.create_task(self._poll_pause())

    async def _read_once(self) -> None:
        """A (re)started reader's first answer: a batch that starts while the fleet is paused must not
        send before this worker has read the pause (one Redis round trip per start, not per call)."""
        first = self._first_read.get(id(asyncio.get_running_loop()))
        if first is not None and not first.done():
            await asyncio.wait([first], timeout=POLL_TIMEOUT_S)

    async def _poll_pause(self) -> None:
        failing = False
        while time.monotonic() - self._last_call < POLL_IDLE_S:
            try:
                ms = await asyncio.wait_for(self._redis().pttl(self.keys[0]), POLL_TIMEOUT_S)
                if ms and ms > 0:
                    self._paused_until = max(self._paused_until, time.monotonic() + ms / 1000)
                self._answered()
                if failing:
                    failing = False
                    log.warning("fleet_pause_readable_again", endpoint=self.eid)
            except (redis.exceptions.RedisError, OSError, asyncio.TimeoutError) as exc:
                self._answered()  # unreadable: calls go on with this worker's own pause state
                if not failing:
                    failing = True
                    log.warning("fleet_pause_unreadable", endpoint=self.eid, error=f"{type(exc).__name__}: {exc}",
                                effect="calls go on with this worker's own 429 pauses until Redis answers again")
            await asyncio.sleep(POLL_S)

    def _answered(self) -> None:
        first = self._first_read.get(id(asyncio.get_running_loop()))
        if first is not None and not first.done():
            first.set_result(None)

    async def _wait_pause(self) -> None:
        wait = self._paused_until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    def slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return _EnforcedSlot(self) if self.enforced else _ProcessSlot(self)

    @contextlib.asynccontextmanager
    async def fleet_slot(self) -> AsyncIterator[None]:
        """The fleet-wide part alone: a slot under ``max_in_flight`` and the rate, across every worker."""
        cap = None
        if self.limits.max_in_flight:
            keeper = keeper_for(self.url)
            cap = keeper.cap(self.eid, int(self.limits.max_in_flight))
            await keeper.acquire(cap)
        try:
            if self.interval_ms:
                await self._rate()
            yield
        finally:
            if cap is not None:
                keeper.release(cap)

    async def _rate(self) -> None:
        while True:
            try:
                wait_ms = await self._redis().eval(_RATE, 1, self.keys[1], self.interval_ms, self.burst_ms)
            except (redis.exceptions.RedisError, OSError) as exc:
                raise self._infra(exc, "asking the rate") from exc
            if int(wait_ms) <= 0:
                return
            await asyncio.sleep(min(float(wait_ms), 5000) / 1000 * (1 + random.uniform(0, 0.1)))

    async def pause(self, seconds: float) -> None:
        """This worker pauses at once; the fleet through Redis (if Redis cannot take it, the 429
        still holds here, and the call's retry is a provider matter, not an infrastructure one)."""
        ms = max(1, int(seconds * 1000))
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)
        try:
            await self._redis().eval(_PAUSE, 1, self.keys[0], ms)
        except (redis.exceptions.RedisError, OSError) as exc:
            log.warning("fleet_pause_not_shared", endpoint=self.eid, error=f"{type(exc).__name__}: {exc}")


class _ProcessSlot:
    """A call's slot when the endpoint has no fleet-wide limit: this process's cap and the fleet's 429
    pause, no Redis on the call's path. A plain async context manager, as it is taken once per provider
    call: the slot as two nested generator-based managers was ~8% of a worker's GIL time at 0 ms (py-spy)."""

    __slots__ = ("limiter", "local")

    def __init__(self, limiter: RedisLimiter) -> None:
        self.limiter = limiter
        self.local = limiter.local.slot()

    async def __aenter__(self) -> None:
        limiter = self.limiter
        await self.local.__aenter__()
        try:
            limiter._watch_pause()
            await limiter._read_once()
            if limiter._paused_until > time.monotonic():
                await limiter._wait_pause()
        except BaseException:
            await self.local.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.local.__aexit__(*exc)


class _EnforcedSlot(_ProcessSlot):
    """... and a fleet-wide slot (``max_in_flight``, the rate) taken after the process's."""

    __slots__ = ("fleet",)

    async def __aenter__(self) -> None:
        await super().__aenter__()
        self.fleet = self.limiter.fleet_slot()
        try:
            await self.fleet.__aenter__()
        except BaseException:
            await self.local.__aexit__(None, None, None)
            raise
        try:
            await self.limiter._wait_pause()  # a pause seen while this call waited for its slot
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.fleet.__aexit__(*exc)
        finally:
            await self.local.__aexit__(*exc)


def install(url: str) -> None:
    """Make every provider call in this process go through the fleet-wide limiter."""
    set_limiter_factory(lambda eid, limits: RedisLimiter(url, eid, limits))


def run_slots(url: str, run_id: str, max_in_flight: int) -> RedisLimiter:
    """``run --concurrency N`` on the farm: at most N of the run's calls in flight across every worker."""
    return RedisLimiter(url, f"run:{run_id}", Limits(max_in_flight=max_in_flight))
