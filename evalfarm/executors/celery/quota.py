"""The quota board in Redis: an endpoint whose quota is exhausted is stopped for every worker.

One key per (endpoint, key) beside the fleet limiter's (``ef:lim:<endpoint id>:quota``), holding
when and why, expiring after the pause. A worker reads it at most every ``CHECK_S`` per
endpoint, so the board costs no Redis round trip per call; a Redis outage only means calls
go on until the provider says 429 again (this worker still keeps its own mark).
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis

from ...logs import get_logger
from ...providers.quota import LocalQuotaBoard, set_quota_board
from .redis_tls import async_client

log = get_logger("evalfarm.quota")
CHECK_S = 1.0


class RedisQuotaBoard:
    def __init__(self, url: str) -> None:
        self.url = url
        self.local = LocalQuotaBoard()
        self._seen: dict[str, tuple[float, dict[str, Any] | None]] = {}  # eid -> (read at, mark)
        self._reading: dict[tuple[int, str], asyncio.Future] = {}  # (loop, eid) -> the read in flight

    @staticmethod
    def key(eid: str) -> str:
        return f"ef:lim:{eid}:quota"

    async def exhausted(self, eid: str) -> dict[str, Any] | None:
        mine = await self.local.exhausted(eid)
        if mine is not None:
            return mine
        seen = self._seen.get(eid)
        if seen is not None and time.monotonic() - seen[0] < CHECK_S:
            return seen[1]
        # one read in flight per endpoint: the 64 calls a batch starts at once share it, rather than
        # each taking a connection of its own for the same GET (and again every CHECK_S)
        key = (id(asyncio.get_running_loop()), eid)
        reading = self._reading.get(key)
        if reading is None:
            reading = self._reading[key] = asyncio.ensure_future(self._read(eid))
            reading.add_done_callback(lambda _: self._reading.pop(key, None))
        return await asyncio.shield(reading)  # a caller cancelled (its batch stopped) leaves the read to the others

    async def _read(self, eid: str) -> dict[str, Any] | None:
        now = time.monotonic()
        try:
            raw = await async_client(self.url).get(self.key(eid))
            mark = json.loads(raw) if raw else None
        except (redis.exceptions.RedisError, OSError, ValueError) as exc:
            log.warning("quota_board_unreadable", endpoint=eid, error=f"{type(exc).__name__}: {exc}")
            mark = None
        self._seen[eid] = (now, mark)
        return mark

    async def mark(self, eid: str, info: dict[str, Any], seconds: float) -> None:
        await self.local.mark(eid, info, seconds)
        try:
            await async_client(self.url).set(self.key(eid), json.dumps(info), px=max(1, int(seconds * 1000)))
        except (redis.exceptions.RedisError, OSError) as exc:
            log.warning("quota_mark_not_shared", endpoint=eid, error=f"{type(exc).__name__}: {exc}")


def install(url: str) -> None:
    """Every provider call of this process asks the fleet's quota board."""
    set_quota_board(RedisQuotaBoard(url))
