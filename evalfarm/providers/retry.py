"""Retries with exponential backoff and full jitter, honouring Retry-After.

Written here rather than with tenacity because the wait must come from the
failure itself (Retry-After in seconds or as an HTTP date) and feed the
fleet-wide pause; the policy is ~40 lines and tested on its own.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable, TypeVar

from .errors import ProviderError

T = TypeVar("T")
_RNG = random.Random()  # seeding a Random per call cost ~13 us (urandom)


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 3  # retries after the first attempt
    base_s: float = 0.5
    cap_s: float = 20.0
    max_retry_after_s: float = 120.0  # a server asking for longer than this is not waited on blindly


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime  # rare (an HTTP date): not worth 9 ms at every start

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


def backoff_s(attempt: int, policy: RetryPolicy, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
    return rng.uniform(0, min(policy.cap_s, policy.base_s * (2 ** attempt)))


def delay_for(exc: ProviderError, attempt: int, policy: RetryPolicy, rng: random.Random) -> float:
    if exc.retry_after is not None:
        # the server said when; add a little jitter so a fleet does not return in lockstep
        return min(exc.retry_after, policy.max_retry_after_s) * (1 + rng.uniform(0, 0.1))
    return backoff_s(attempt, policy, rng)


async def with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy = RetryPolicy(),
                       sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                       rng: random.Random | None = None,
                       on_retry: Callable[[ProviderError, float], Awaitable[None] | None] | None = None) -> T:
    """Run ``call``; retry transient ProviderErrors up to ``policy.retries`` times."""
    rng = rng or _RNG
    attempt = 0
    while True:
        try:
            return await call()
        except ProviderError as exc:
            if not exc.transient or attempt >= policy.retries:
                exc.attempts = attempt + 1  # type: ignore[attr-defined]
                raise
            delay = delay_for(exc, attempt, policy, rng)
            if on_retry is not None:
                maybe = on_retry(exc, delay)
                if asyncio.iscoroutine(maybe):
                    await maybe
            await sleep(delay)
            attempt += 1
