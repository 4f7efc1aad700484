"""Fleet-wide provider limits in Redis: calls in flight, requests per minute, 429 pauses.

Each call takes a slot with one Lua script (atomic across every worker): it
waits while the endpoint is paused, while ``max_in_flight`` leases are held, or
until the GCRA rate allows the next request. Leases expire, so a SIGKILLed
worker cannot hold slots forever. A 429 with Retry-After sets the pause key for
the whole fleet. With no limits configured a call never touches Redis: a
background task on the worker's loop reads the pause key every 200 ms while calls
are being made, and a Redis outage there only logs (calls go on with this
worker's own pause state). Where Redis is on the call path (a fleet-wide
``max_in_flight`` or rate), a Redis error is an ``InfrastructureError``: the item
stays unfinished and its batch is retried, it never becomes the item's outcome.
"""
from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from typing import AsyncIterator

import redis

from ...errors import InfrastructureError
from ...logs import get_logger
from ...providers.limits import Limits, LocalLimiter, set_limiter_factory
from .redis_tls import async_client

log = get_logger("evalfarm.limits")
POLL_S = 0.2  # how often the fleet-wide pause is read while calls are made
POLL_IDLE_S = 5.0  # the reader stops after this long without a call (and starts again with the next)
POLL_TIMEOUT_S = 2.0  # a read that hangs (a partition) is given up; the next one tries again

_ACQUIRE = """
-- KEYS: pause, inflight (zset token->lease expiry ms), gcra (tat ms)
-- ARGV: token, max_in_flight, interval_ms, burst_ms, lease_ms ; returns ms to wait, 0 = acquired
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p = redis.call('PTTL', KEYS[1])
if p > 0 then return p end
local maxf = tonumber(ARGV[2])
if maxf > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= maxf then return 25 end
end
local interval = tonumber(ARGV[3])
if interval > 0 then
  local tat = tonumber(redis.call('GET', KEYS[3]) or now)
  if tat < now then tat = now end
  local allow_at = tat + interval - tonumber(ARGV[4])
  if allow_at > now then return allow_at - now end
  redis.call('SET', KEYS[3], tat + interval, 'PX', math.floor(tat + interval - now + 60000))
end
if maxf > 0 then redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[1]) end
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

    def __init__(self, url: str, eid: str, limits: Limits, lease_s: float = 660.0) -> None:
        self.url, self.eid, self.limits, self.lease_ms = url, eid, limits, int(lease_s * 1000)
        self.keys = [f"ef:lim:{eid}:pause", f"ef:lim:{eid}:inflight", f"ef:lim:{eid}:gcra"]
        rpm = limits.requests_per_minute or 0
        self.interval_ms = 60000.0 / rpm if rpm else 0
        self.burst_ms = max(1, rpm // 60) * self.interval_ms if rpm else 0
        self.enforced = bool(limits.max_in_flight or rpm)
        self.local = LocalLimiter(Limits())  # the per-process cap
        self._paused_until = 0.0
        self._last_call = 0.0
        self._pollers: dict[int, asyncio.Task] = {}  # per event loop

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
            self._pollers[id(loop)] = loop.create_task(self._poll_pause())

    async def _poll_pause(self) -> None:
        failing = False
        while time.monotonic() - self._last_call < POLL_IDLE_S:
            try:
                ms = await asyncio.wait_for(self._redis().pttl(self.keys[0]), POLL_TIMEOUT_S)
                if ms and ms > 0:
                    self._paused_until = max(self._paused_until, time.monotonic() + ms / 1000)
                if failing:
                    failing = False
                    log.warning("fleet_pause_readable_again", endpoint=self.eid)
            except (redis.exceptions.RedisError, OSError, asyncio.TimeoutError) as exc:
                if not failing:
                    failing = True
                    log.warning("fleet_pause_unreadable", endpoint=self.eid, error=f"{type(exc).__name__}: {exc}",
                                effect="calls go on with this worker's own 429 pauses until Redis answers again")
            await asyncio.sleep(POLL_S)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.local.slot():
            if not self.enforced:
                self._watch_pause()
                wait = self._paused_until - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                yield
                return
            async with self.fleet_slot():
                yield

    @contextlib.asynccontextmanager
    async def fleet_slot(self) -> AsyncIterator[None]:
        """The fleet-wide part alone: a lease under ``max_in_flight`` and the rate, across every worker."""
        r = self._redis()
        token = uuid.uuid4().hex
        while True:
            try:
                wait_ms = await r.eval(_ACQUIRE, 3, *self.keys, token, self.limits.max_in_flight or 0,
                                       self.interval_ms, self.burst_ms, self.lease_ms)
            except (redis.exceptions.RedisError, OSError) as exc:
                raise self._infra(exc, "taking a slot") from exc
            if int(wait_ms) <= 0:
                break
            await asyncio.sleep(min(float(wait_ms), 5000) / 1000 * (1 + random.uniform(0, 0.1)))
        try:
            yield
        finally:
            if self.limits.max_in_flight:
                try:
                    await r.zrem(self.keys[1], token)
                except (redis.exceptions.RedisError, OSError) as exc:  # the lease expires by itself
                    log.warning("fleet_slot_release_failed", endpoint=self.eid, error=f"{type(exc).__name__}: {exc}")

    async def pause(self, seconds: float) -> None:
        """This worker pauses at once; the fleet through Redis (if Redis cannot take it, the 429
        still holds here, and the call's retry is a provider matter, not an infrastructure one)."""
        ms = max(1, int(seconds * 1000))
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)
        try:
            await self._redis().eval(_PAUSE, 1, self.keys[0], ms)
        except (redis.exceptions.RedisError, OSError) as exc:
            log.warning("fleet_pause_not_shared", endpoint=self.eid, error=f"{type(exc).__name__}: {exc}")


def install(url: str) -> None:
    """Make every provider call in this process go through the fleet-wide limiter."""
    set_limiter_factory(lambda eid, limits: RedisLimiter(url, eid, limits))


def run_slots(url: str, run_id: str, max_in_flight: int) -> RedisLimiter:
    """``run --concurrency N`` on the farm: at most N of the run's calls in flight across every worker."""
    return RedisLimiter(url, f"run:{run_id}", Limits(max_in_flight=max_in_flight))
