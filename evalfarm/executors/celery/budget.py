"""A budgeted farm run's spend counter in Redis: every worker charges it, every worker asks it.

Each finished call adds its cost (model or judge) to the run's ``spent_nusd`` counter as it
returns, not when its batch is recorded: a batch of 100 calls would otherwise spend unseen.
The counter counts real spend, so a call repeated by a redelivered batch counts twice (it was
paid twice). Before each call a worker reads the counter (one HGET: a budgeted run puts Redis on
the call path, as a fleet-wide ``max_in_flight`` does; a view even 100 ms stale let a thread that
picked up a new batch send it after the stop); once the budget is spent, that worker never reads it
again for the run. The
charge that crosses the budget stamps the moment (Redis ``TIME``) as ``budget_crossed_us``,
so the stop's latency can be measured against the requests the provider saw.
"""
from __future__ import annotations

from typing import Any

import redis

from ...engine.budget import SpendGuard
from ...errors import InfrastructureError
from ...logs import get_logger
from ..store import COST_SCALE, SPENT_FIELD
from .redis_tls import async_client

log = get_logger("evalfarm.budget")

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
        self._over = False

    async def exhausted(self) -> bool:
        if self._over:
            return True
        try:
            raw = await async_client(self.url).hget(self.key, SPENT_FIELD)
        except (redis.exceptions.RedisError, OSError) as exc:
            raise InfrastructureError(f"the run's spend counter is unreadable: {type(exc).__name__}: {exc}") from exc
        self._over = int(raw or 0) >= self.limit_nusd
        return self._over

    async def charge(self, usd: float) -> None:
        nusd = int(round(usd * COST_SCALE))
        if nusd <= 0:
            return
        try:
            spent = int(await async_client(self.url).eval(_CHARGE, 1, self.key, nusd, self.limit_nusd))
            self._over = self._over or spent >= self.limit_nusd
        except (redis.exceptions.RedisError, OSError) as exc:  # the call was made and paid: keep its outcome
            log.warning("spend_not_counted", run_id=self.run_id, usd=usd, error=f"{type(exc).__name__}: {exc}")


def spend_guard(store_url: str | None, meta: dict[str, Any]) -> SpendGuard | None:
    """The run's guard when it has a budget (``run --max-cost`` / ``budget_usd``), else None."""
    budget = (meta.get("options") or {}).get("budget_usd")
    if budget is None or not store_url:
        return None
    return RedisSpend(store_url, meta["run_id"], budget)
