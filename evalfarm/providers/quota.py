"""An exhausted quota stops an endpoint for the whole fleet instead of being retried till morning.

A 429 is usually "slow down" (retried, with Retry-After), but OpenAI also answers 429 with
``insufficient_quota`` when the account has no credit left: waiting does not fix that, and a
fleet that retries it hammers the endpoint all night. Such a 429 (OpenAI's code, or the regex
in ``EVALFARM_QUOTA_PATTERN``) is not retried: the endpoint (and key) is marked exhausted on
the quota board for ``EVALFARM_QUOTA_PAUSE_S`` (an hour by default), and every call to it,
in every worker, fails at once with ``QuotaExhausted`` without sending anything. When the
mark expires one call probes again. The mark is apart from the Retry-After pause because
calls wait out a pause; they must not wait an hour for a quota that will not come back.

The board is per process by default; the farm installs a Redis board (``backends/celery/quota.py``).
"""
from __future__ import annotations

import os
import re
import time
from datetime import datetime, timezone
from typing import Any, Protocol

from ..logs import get_logger
from .errors import ProviderError

log = get_logger("evalfarm.quota")
DEFAULT_PATTERN = r"insufficient_quota|exceeded your current quota|quota (has been )?exhausted"
DEFAULT_PAUSE_S = 3600.0


class QuotaExhausted(ProviderError):
    """The provider says the account's quota is used up: not retried, not a quality verdict."""


def pattern() -> re.Pattern[str]:
    """What marks a 429 as an exhausted quota (EVALFARM_QUOTA_PATTERN, a regex, case-insensitive)."""
    raw = os.environ.get("EVALFARM_QUOTA_PATTERN") or DEFAULT_PATTERN
    try:
        return re.compile(raw, re.I)
    except re.error:
        log.warning("bad_quota_pattern", pattern=raw, using=DEFAULT_PATTERN)
        return re.compile(DEFAULT_PATTERN, re.I)


def pause_s() -> float:
    try:
        return max(1.0, float(os.environ.get("EVALFARM_QUOTA_PAUSE_S") or DEFAULT_PAUSE_S))
    except ValueError:
        return DEFAULT_PAUSE_S


def is_quota(exc: ProviderError) -> bool:
    return exc.status == 429 and bool(pattern().search(str(exc)))


class QuotaBoard(Protocol):
    async def exhausted(self, eid: str) -> dict[str, Any] | None:
        """The mark on endpoint ``eid`` (since, until, message) while it holds, else None."""

    async def mark(self, eid: str, info: dict[str, Any], seconds: float) -> None: ...


class LocalQuotaBoard:
    """This process only."""

    def __init__(self) -> None:
        self._marks: dict[str, tuple[float, dict[str, Any]]] = {}

    async def exhausted(self, eid: str) -> dict[str, Any] | None:
        held = self._marks.get(eid)
        if held is None or held[0] <= time.monotonic():
            return None
        return held[1]

    async def mark(self, eid: str, info: dict[str, Any], seconds: float) -> None:
        self._marks[eid] = (time.monotonic() + seconds, info)


_BOARD: QuotaBoard = LocalQuotaBoard()


def set_quota_board(board: QuotaBoard | None) -> None:
    """The farm installs a fleet-wide board; None restores the per-process one."""
    global _BOARD
    _BOARD = board or LocalQuotaBoard()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


async def refuse_if_exhausted(eid: str, url: str) -> None:
    """Before a request: an endpoint whose quota is marked exhausted is not called."""
    info = await _BOARD.exhausted(eid)
    if info is not None:
        raise QuotaExhausted(f"not sent: the quota of {url} is exhausted (HTTP 429 at {info.get('since')}: "
                             f"{str(info.get('message', ''))[:160]}); the endpoint is paused for the whole fleet "
                             f"until {info.get('until')}", 429)


async def exhausted_now(eid: str, url: str, exc: ProviderError) -> QuotaExhausted:
    """A 429 said the quota is gone: mark the endpoint for the fleet and say so once."""
    seconds = pause_s()
    now = time.time()
    body = str(exc).removeprefix("HTTP 429 rate limited: ")
    info = {"since": _iso(now), "until": _iso(now + seconds), "message": body[:300]}
    await _BOARD.mark(eid, info, seconds)
    log.warning("quota_exhausted", endpoint=url, pause_s=seconds, message=body[:200])
    return QuotaExhausted(f"HTTP 429 quota exhausted at {url}: {body[:200]}; not retried: the endpoint is paused for "
                          f"the whole fleet until {info['until']} (EVALFARM_QUOTA_PAUSE_S)", 429)
