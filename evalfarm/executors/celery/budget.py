"""A budgeted farm run's spend in Redis: per-worker records that never go backwards.

Each worker process keeps its own record of what it spent on the run (nano-dollars, in process)
and states it in the run's ``spend`` hash (field: the process, value: its whole record, set with
``max`` by a Lua call, so a repeated or late write is harmless). The run's ``spent_nusd`` counter is
the sum of the records. Each finished call (model or judge) is added to the record as it returns; a
call made while Redis is unreachable is in the record and is counted with the next write that gets
through (every ``exhausted`` check writes an unstated record; a task re-states it every second while
the run is live, so a restore or restart of Redis gets it back within a second).

Before each call a worker reads the records (the same Lua call) and judges the spend by the highest
value it has seen for each record, so its view never goes backwards: a Redis restored from an older
snapshot cannot make it spend the budget again. A record found lower than a value seen and not
re-stated within ``LOST_AFTER_S`` (its worker is gone) means the run store lost spend records: the run
is stopped (state ``failed``) with one line, ``the run store lost spend records: ...; resume after
checking``. Requests at the provider never exceed the budget plus the calls in flight. The charge
that crosses the budget stamps the moment (Redis ``TIME``) as ``budget_crossed_us``, so the stop's
latency can be measured against the requests the provider saw.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import redis

from ...engine.budget import SpendGuard
from ...errors import InfrastructureError
from ...logs import get_logger
from ..store import COST_SCALE
from .leases import holder_id
from .redis_tls import async_client

log = get_logger("evalfarm.budget")
RESTATE_EVERY_S = 1.0  # a worker re-states its record this often while it has spent on a live run
LOST_AFTER_S = 3.0  # a record lower than seen for this long (nobody re-stated it) is lost
IDLE_STOP_S = 120.0  # the re-stating task stops this long after the worker's last call for the run

_SPEND = """
-- KEYS: spend (hash process -> its record), counts, meta, state ; ARGV: process, its record, limit
-- returns {state, {process, record, ...}, epoch} or {'gone'} when the run's meta is gone (the epoch
-- moves when a run stopped for lost records is resumed: what the store holds then is the baseline)
if redis.call('EXISTS', KEYS[3]) == 0 then return {'gone'} end
local mine = tonumber(ARGV[2])
if mine > 0 and mine > tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  local ttl = redis.call('PTTL', KEYS[3])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
end
local all = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 2, #all, 2 do total = total + tonumber(all[i]) end
local before = tonumber(redis.call('HGET', KEYS[2], 'spent_nusd') or '0')
if total > before then
  redis.call('HSET', KEYS[2], 'spent_nusd', total)
  local limit = tonumber(ARGV[3])
  if total >= limit and before < limit then
    local t = redis.call('TIME')
    redis.call('HSET', KEYS[2], 'budget_crossed_us', t[1] .. string.rep('0', 6 - #t[2]) .. t[2])
  end
end
return {redis.call('GET', KEYS[4]) or '', all, redis.call('HGET', KEYS[2], 'spend_epoch') or '0'}
"""


class SpendLost(InfrastructureError):
    """The run was stopped: its store lost spend records (or the run itself)."""


class RedisSpend:
    """This process's spend on one run and its view of the whole fleet's (one per process and run)."""

    def __init__(self, url: str, run_id: str, limit_usd: float, holder: str | None = None) -> None:
        self.url, self.run_id, self.limit_usd = url, run_id, float(limit_usd)
        self.keys = [f"ef:run:{run_id}:{part}" for part in ("spend", "counts", "meta", "state")]
        self.limit_nusd = int(round(self.limit_usd * COST_SCALE))
        self.holder = holder or holder_id()
        self.mine = 0  # what this process spent on the run (every call it made, counted or not yet)
        self.stated = 0  # the record Redis last took
        self.seen: dict[str, int] = {}  # the highest record seen per process
        self.low_since: dict[str, float] = {}  # records found below what was seen, since when
        self.epoch = 0  # the run's spend epoch (moved by a resume after lost records)
        self._over = False
        self._last_call = 0.0
        self._task: asyncio.Task | None = None

    def view_nusd(self) -> int:
        """The fleet's spend as this process has seen it: never lower than before."""
        return sum(self.seen.values())

    async def _sync(self) -> str:
        """State this process's record and read every record; returns the run's state."""
        mine = self.mine
        try:
            reply = await async_client(self.url).eval(_SPEND, 4, *self.keys, self.holder, mine, self.limit_nusd)
        except (redis.exceptions.RedisError, OSError) as exc:
            raise InfrastructureError(f"the run's spend records are unreachable: {type(exc).__name__}: {exc}") from exc
        state = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        if state == "gone":
            raise SpendLost(f"run {self.run_id}: the run store lost the run (its keys are gone); no call is made")
        self.stated = max(self.stated, mine)
        flat = reply[1]
        now = time.monotonic()
        current = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        current[self.holder] = max(current.get(self.holder, 0), mine)
        epoch = int(reply[2] or 0)
        if epoch != self.epoch:  # resumed after checking: the records as they are now are the baseline
            self.epoch, self.seen, self.low_since = epoch, dict(current), {}
        lost = []
        for h in set(current) | set(self.seen):
            value, seen = current.get(h, 0), self.seen.get(h, 0)
            if value >= seen:
                self.seen[h] = value
                self.low_since.pop(h, None)
            elif now - self.low_since.setdefault(h, now) >= LOST_AFTER_S:
                lost.append((h, value, seen))
        if lost and state not in ("failed", "cancelled", "done"):
            await self._stop_run(lost)
            state = "failed"
        return state

    async def _stop_run(self, lost: list[tuple[str, int, int]]) -> None:
        from .store import store_for

        h, value, seen = lost[0]
        who = ":".join(h.split(":")[:2])
        line = (f"the run store lost spend records: worker {who}'s record reads ${value / COST_SCALE:.6f}, "
                f"${seen / COST_SCALE:.6f} was seen ({len(lost)} record(s) lower than seen; Redis restored from "
                f"an older snapshot or flushed?); resume after checking: 'evalfarm resume {self.run_id}'")
        ok, _ = await asyncio.to_thread(store_for(self.url).transition, self.run_id, "failed",
                                        ("dispatching", "running"), failure=line, spend_lost=True)
        if ok:
            log.error("spend_records_lost", run_id=self.run_id, records=len(lost), worker=who,
                      record_usd=value / COST_SCALE, seen_usd=seen / COST_SCALE)
        for h, value, _ in lost:  # said once: a resume starts from what the store holds now
            self.seen[h] = value
            self.low_since.pop(h, None)

    async def exhausted(self) -> bool:
        self._last_call = time.monotonic()
        self._restating()
        if self._over:
            return True
        state = await self._sync()
        if state == "failed":
            raise SpendLost(f"run {self.run_id} was stopped (failed): no call is made")
        self._over = self.view_nusd() >= self.limit_nusd
        return self._over

    async def charge(self, usd: float) -> None:
        nusd = int(round(usd * COST_SCALE))
        if nusd <= 0:
            return
        self.mine += nusd  # in the record at once: counted with the next write that gets through
        try:
            await self._sync()
        except InfrastructureError as exc:  # the call was made and paid: keep its outcome
            log.warning("spend_not_yet_counted", run_id=self.run_id, usd=usd, unstated_usd=(self.mine - self.stated)
                        / COST_SCALE, error=str(exc), effect="counted when Redis answers (re-stated every second)")
        self._over = self._over or self.view_nusd() >= self.limit_nusd

    def _restating(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._restate())

    async def _restate(self) -> None:
        """Re-state the record every second while the worker works on the run, so a Redis restarted
        or restored from a snapshot gets it back even if this worker makes no further call."""
        while time.monotonic() - self._last_call < IDLE_STOP_S:
            await asyncio.sleep(RESTATE_EVERY_S)
            if not self.mine:
                continue
            try:
                state = await self._sync()
            except InfrastructureError:
                continue
            if state in ("done", "failed", "cancelled"):
                return


def spend_guard(store_url: str | None, meta: dict[str, Any]) -> SpendGuard | None:
    """The run's guard when it has a budget (``run --max-cost`` / ``budget_usd``), else None."""
    budget = (meta.get("options") or {}).get("budget_usd")
    if budget is None or not store_url:
        return None
    return RedisSpend(store_url, meta["run_id"], budget)
