"""A budgeted farm run's spend counter in Redis: every worker charges it, every worker asks it.

Each finished call adds its cost (model or judge) to the run's ``spent_nusd`` counter as it
returns, not when its batch is recorded: a batch of 100 calls would otherwise spend unseen.
The counter counts real spend, so a call repeated by a redelivered batch counts twice (it was
paid twice). Before each call a worker asks whether the budget is spent, reading the counter
at most every ``CHECK_S``; once it is, that worker never reads it again for the run. The
charge that crosses the budget stamps the moment (Redis ``TIME``) as ``budget_crossed_us``,
so the stop's latency can be measured against the requests the provider saw.
"""
from __future__ import annotations

import time
from typing import Any

import redis

from ...engine.budget import SpendGuard
from ...errors import InfrastructureError
from ...logs import get_logger
from ..store import COST_SCALE, SPENT_FIELD
from .redis_tls import async_client

log = get_logger("evalfarm.budget")
CHECK_S = 0.1  # how stale a worker's view of the spend may be before a call (a read per 100 ms at most)
CROSSED_FIELD = "budget_crossed_us"

_CHARGE = """
-- KEYS: the run's counters ; ARGV: nano-dollars, limit in nano-dollars ; returns the new spend
local new = redis.call('HINCRBY', KEYS[1], 'spent_nusd', ARGV[1])
local limit = tonumber(ARGV[2])
if new >= limit and new - tonumber(ARGV[1]) < limit then
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'budget_crossed_us', t[1] .. string.rep('0', 6 - #t[2]) .. t[2])
end
return new
"""


class RedisSpend:
    """The fleet-wide spend counter of one run (one per worker process and run)."""

    def __init__(self, url: str, run_id: str, limit_usd: float) -> None:
        self.url, self.run_id, self.limit_usd = url, run_id, float(limit_usd)
        self.key = f"ef:run:{run_id}:counts"  # the run store's counters: they expire with the run
        self.limit_nusd = int(round(self.limit_usd * COST_SCALE))
        self._spent = 0
        self._read_at = float("-inf")
        self._over = False

    async def exhausted(self) -> bool:
        if self._over:
            return True
        now = time.monotonic()
        if now - self._read_at >= CHECK_S:
            try:
                raw = await async_client(self.url).hget(self.key, SPENT_FIELD)
            except (redis.exceptions.RedisError, OSError) as exc:
                raise InfrastructureError(f"the run's spend counter is unreadable: {type(exc).__name__}: {exc}") \
                    from exc
            self._spent, self._read_at = int(raw or 0), now
        self._over = self._spent >= self.limit_nusd
        return self._over

    async def charge(self, usd: float) -> None:
        nusd = int(round(usd * COST_SCALE))
        if nusd <= 0:
            return
        try:
            self._spent = int(await async_client(self.url).eval(_CHARGE, 1, self.key, nusd, self.limit_nusd))
            self._read_at = time.monotonic()
        except (redis.exceptions.RedisError, OSError) as exc:  # the call was made and paid: keep its outcome
            log.warning("spend_not_counted", run_id=self.run_id, usd=usd, error=f"{type(exc).__name__}: {exc}")


def spend_guard(store_url: str | None, meta: dict[str, Any]) -> SpendGuard | None:
    """The run's guard when it has a budget (``run --max-cost`` / ``budget_usd``), else None."""
    budget = (meta.get("options") or {}).get("budget_usd")
    if budget is None or not store_url:
        return None
    return RedisSpend(store_url, meta["run_id"], budget)
