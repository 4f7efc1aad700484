"""Fleet slots as leases: each worker process holds a count of a cap's slots under one lease.

A cap (an endpoint's ``max_in_flight``, a run's ``--concurrency``) lives in two Redis keys:
``leases`` (hash: holder -> slots it holds) and ``renewed`` (zset: holder -> when it last renewed,
Redis ``TIME`` in ms). A holder is one worker process. Its lease lasts ``EVALFARM_LEASE_S``
(default 10 s) after its last renewal; whoever next touches the cap drops expired holders, so the
slots of a SIGKILLed, SIGSTOPped or partitioned worker return within the lease.

In a process, one task per event loop (the ``LeaseKeeper``) does every Redis write for every cap:
it takes slots for the calls waiting, in one round trip for all caps (a pipeline of one Lua call
per cap), gives back what no call needs, and renews what is held every lease/3. A call never talks
to Redis: it takes a slot the process holds or waits for the keeper; a finished call hands its slot
to the next waiting call. So the connections a worker uses for its slots do not grow with its
calls in flight (redis-py 8 caps a pool at 100 connections: one connection per waiting call ran
out at 64 in flight).

Every write states the holder's whole count (not a change), so it is idempotent: after a Redis
restart, with its data (``appendonly``) or without, the first write re-asserts what each live
process holds and expired holders are dropped; the cap is rebuilt from live leases. A holder Redis no
longer knows as live (its lease ran out while it was stopped or cut off) gets back only what is free,
and until Redis has answered, a process whose lease ran out by its own clock hands no slot to a call:
a resumed worker never sends beside the one that took its slots. While Redis is unreachable, the
slots a process holds stay in use for at most the lease (its calls go on); a call that has waited
``OUTAGE_GRACE_S`` for a new slot while Redis does not answer gets an ``InfrastructureError`` (its
batch runs again).
"""
from __future__ import annotations

import asyncio
import os
import random
import socket
import time
import uuid
from collections import deque

import redis

from ...envvars import env_float
from ...errors import InfrastructureError
from ...logs import get_logger
from .redis_tls import async_client

log = get_logger("evalfarm.leases")
DENIED_RETRY_S = 0.03  # a cap that had no slot free is asked again after this (with jitter)
OUTAGE_GRACE_S = 2.0  # a call waiting for a new slot this long while Redis does not answer gets an error
RETRY_MAX_S = 1.0  # the keeper retries an unreachable Redis at most this far apart

_LEASE = """
-- KEYS: leases (hash holder -> slots), renewed (zset holder -> ms of its last renewal)
-- ARGV: holder, held (its own count), want (more slots wanted), max, lease ms
-- Drops expired holders, grants up to `want` more under `max`, states this holder's whole count
-- and renews it; returns the change to its count (negative: its lease had run out and others hold
-- some of its slots now).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[5])
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - lease))
for _, h in ipairs(dead) do redis.call('HDEL', KEYS[1], h) end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - lease)) end
local stated, want, maxf = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local held = stated
-- a holder Redis does not know as live (its lease ran out: SIGSTOP, partition; or Redis lost its data)
-- gets back only what is free: others may hold its slots now
local live = redis.call('ZSCORE', KEYS[2], ARGV[1])
local grant = 0
if want > 0 or (held > 0 and not live) then
  local others = 0
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] then
      if redis.call('ZSCORE', KEYS[2], all[i]) then others = others + tonumber(all[i + 1])
      else redis.call('HDEL', KEYS[1], all[i]) end
    end
  end
  if not live then held = math.max(0, math.min(held, maxf - others)) end
  if want > 0 then grant = math.max(0, math.min(want, maxf - others - held)) end
end
local mine = held + grant
if mine > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], mine)
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  local ttl = math.max(lease * 6, 600000)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
else
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return mine - stated
"""


def lease_s() -> float:
    return env_float("EVALFARM_LEASE_S", 10.0, 0.5, 3600)


def holder_id() -> str:
    """This process, as other processes and ``status`` see it: host, pid and a start nonce."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def cap_keys(eid: str) -> tuple[str, str]:
    return f"ef:lim:{eid}:leases", f"ef:lim:{eid}:renewed"


class Cap:
    """One fleet-wide cap as this process sees it: slots held (under its lease), in use, calls waiting."""

    def __init__(self, eid: str, max_n: int, lease: float = 10.0) -> None:
        self.eid, self.max, self.lease = eid, max_n, lease
        self.keys = cap_keys(eid)
        self.held = 0  # slots this process holds under its lease (by its own account)
        self.in_use = 0  # <= held, always
        self.waiters: deque[tuple[float, asyncio.Future]] = deque()
        self.renewed = 0.0  # monotonic time of the last write Redis took
        self.retry_at = 0.0  # when the cap had no slot free: not asked again before this
        self.stated = 0  # the count Redis last took from us

    def wanted(self) -> int:
        return min(self.max, self.in_use + len(self.waiters))

    def fresh(self) -> bool:
        """Our lease is still live by our own clock. A process that was stopped (SIGSTOP) or cut off for
        longer than the lease may find its slots taken by others: it hands none out until the keeper
        has stated its count again and Redis answered with what it still holds."""
        return time.monotonic() - self.renewed < self.lease

    def dispatch(self) -> None:
        """Hand free slots this process holds to waiting calls, oldest first (only under a live lease)."""
        if not self.fresh():
            return
        while self.waiters and self.in_use < self.held:
            _, fut = self.waiters.popleft()
            if fut.done():
                continue
            self.in_use += 1
            fut.set_result(None)

    def fail_waiters(self, exc: BaseException, older_than: float) -> None:
        keep: deque = deque()
        for since, fut in self.waiters:
            if fut.done():
                continue
            if since <= older_than:
                fut.set_exception(exc)
            else:
                keep.append((since, fut))
        self.waiters = keep


class LeaseKeeper:
    """The one task per process and event loop that talks to Redis about fleet slots."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.holder = holder_id()
        self.lease_s = lease_s()
        self.caps: dict[str, Cap] = {}
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.failing_since: float | None = None

    def cap(self, eid: str, max_n: int) -> Cap:
        """Two runs may cap one endpoint differently: each (endpoint, cap) is its own holder field
        (``holder/max``), counted together and each checked against its own cap."""
        c = self.caps.get(f"{eid}/{max_n}")
        if c is None:
            c = self.caps[f"{eid}/{max_n}"] = Cap(eid, max_n, self.lease_s)
        return c

    def poke(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        self._event.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def acquire(self, cap: Cap) -> None:
        if cap.in_use < cap.held and not cap.waiters and cap.fresh():
            cap.in_use += 1
            return
        fut = asyncio.get_running_loop().create_future()
        cap.waiters.append((time.monotonic(), fut))
        self.poke()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(cap)  # granted, then cancelled: give it back
            raise

    def release(self, cap: Cap) -> None:
        cap.in_use -= 1
        cap.dispatch()
        if cap.wanted() < cap.held or not cap.fresh():
            self.poke()

    def _ops(self, now: float) -> list[tuple[Cap, int, int]]:
        """(cap, count to state, more wanted) for every cap that needs a write now."""
        ops = []
        for cap in self.caps.values():
            want = cap.wanted() - cap.held
            if want < 0:  # give back what no call needs (at once: nobody can take those slots now)
                cap.held = cap.wanted()
                ops.append((cap, cap.held, 0))
            elif want > 0 and now >= cap.retry_at:
                ops.append((cap, cap.held, want))
            elif cap.held != cap.stated or (cap.held and now - cap.renewed >= self.lease_s / 3) \
                    or (cap.waiters and not cap.fresh()):
                ops.append((cap, cap.held, 0))
        return ops

    def _next_wake(self, now: float) -> float | None:
        wakes = []
        for cap in self.caps.values():
            if cap.wanted() > cap.held:
                wakes.append(max(cap.retry_at, now))
            if cap.held or cap.stated:
                wakes.append(cap.renewed + self.lease_s / 3)
        return min(wakes) - now if wakes else None

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            assert self._event is not None
            self._event.clear()
            await asyncio.sleep(0)  # calls released in the same tick are written together
            now = time.monotonic()
            ops = self._ops(now)
            if ops:
                try:
                    pipe = async_client(self.url).pipeline(transaction=False)
                    for cap, held, want in ops:
                        pipe.eval(_LEASE, 2, *cap.keys, f"{self.holder}/{cap.max}", held, want, cap.max, int(self.lease_s * 1000))
                    grants = await asyncio.wait_for(pipe.execute(), max(2.0, self.lease_s / 2))
                except (redis.exceptions.RedisError, OSError, asyncio.TimeoutError) as exc:
                    self._failed(exc, now)
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, RETRY_MAX_S)
                    continue
                backoff = 0.1
                self._answered(ops, grants, now)
            wake = self._next_wake(time.monotonic())
            if wake is None:
                return  # nothing held, nobody waiting: the next call starts the keeper again
            await self._sleep(max(0.0, wake))

    async def _sleep(self, seconds: float) -> None:
        assert self._event is not None
        try:
            await asyncio.wait_for(self._event.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _failed(self, exc: BaseException, now: float) -> None:
        if self.failing_since is None:
            self.failing_since = now
            log.warning("fleet_leases_unreachable", error=f"{type(exc).__name__}: {exc}",
                        held={c.eid: c.held for c in self.caps.values() if c.held},
                        effect="calls go on with the slots this worker holds; calls waiting for a new slot "
                               f"get an infrastructure error after {OUTAGE_GRACE_S:g} s (their batch runs again)")
        if now - self.failing_since >= OUTAGE_GRACE_S:
            err = InfrastructureError(f"the fleet limiter's Redis failed (taking a slot): {type(exc).__name__}: {exc}")
            for cap in self.caps.values():
                cap.fail_waiters(err, now - OUTAGE_GRACE_S)

    def _answered(self, ops: list[tuple[Cap, int, int]], grants: list, now: float) -> None:
        if self.failing_since is not None:
            log.warning("fleet_leases_restored", after_s=round(now - self.failing_since, 2),
                        reasserted={c.eid: h for c, h, _ in ops if h})
            self.failing_since = None
        for (cap, held, want), grant in zip(ops, grants):
            grant = int(grant)
            cap.renewed, cap.stated = now, held + grant
            cap.held += grant
            if want and grant < want:
                cap.retry_at = now + DENIED_RETRY_S * (1 + random.random())
            cap.dispatch()
        for eid in [e for e, c in self.caps.items() if not (c.held or c.stated or c.waiters or c.in_use)]:
            del self.caps[eid]


_KEEPERS: dict[tuple[int, str], LeaseKeeper] = {}


def keeper_for(url: str) -> LeaseKeeper:
    """One keeper per (event loop, Redis URL) in this process."""
    key = (id(asyncio.get_running_loop()), url)
    k = _KEEPERS.get(key)
    if k is None:
        k = _KEEPERS[key] = LeaseKeeper(url)
    return k


def holders(r, eid: str, now_ms: int | None = None) -> list[tuple[str, int, float]]:
    """(holder, slots, seconds since its last renewal) of a cap, most slots first (a sync client)."""
    leases, renewed = cap_keys(eid)
    counts = r.hgetall(leases) or {}
    if not counts:
        return []
    if now_ms is None:
        sec, usec = r.time()
        now_ms = int(sec) * 1000 + int(usec) // 1000
    out = []
    for h, n in counts.items():
        score = r.zscore(renewed, h)
        name = h.decode("utf-8", "replace") if isinstance(h, bytes) else str(h)
        age = (now_ms - score) / 1000 if score is not None else float("inf")
        out.append((name, int(n), age))
    return sorted(out, key=lambda x: -x[1])


def describe(r, eid: str, max_n: int, lease: float | None = None) -> str | None:
    """``4 of 4 fleet slots held: worker H 4 (no renewal for 12 s: its lease ran out)``, or None when
    no slot is held. ``r``: a sync client; ``lease``: seconds (the reader's ``EVALFARM_LEASE_S``)."""
    lease = lease if lease is not None else lease_s()
    found = holders(r, eid)
    if not found:
        return None
    parts = []
    for holder, n, age in found[:4]:
        name = holder.rsplit("/", 1)[0]
        host_pid = ":".join(name.split(":")[:2])
        note = (f"no renewal for {age:.0f} s: its lease ran out, the next worker that asks takes them"
                if age > lease else f"renewed {age:.0f} s ago")
        parts.append(f"worker {host_pid} {n} ({note})")
    more = f" and {len(found) - 4} more worker(s)" if len(found) > 4 else ""
    return f"{sum(n for _, n, _ in found)} of {max_n} fleet slots held: " + ", ".join(parts) + more
