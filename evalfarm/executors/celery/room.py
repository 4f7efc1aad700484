"""Will a run fit in Redis? The estimate checked before planning, and what a full Redis looks like.

A run keeps in Redis its plan (each item's JSON and key, the plan's order, its prompts), each
item's outcome, the outcome and the prompt again in the report, and a few counters per item.
Measured here (redis 7, one adapter, outputs as long as the prompts): 2.8 KB per item for
300-byte item JSON, 6.3 KB for 880 bytes, 15.6 KB for 2.3 KB, i.e. about 6.5 x the item's JSON
+ 0.8 KB. The estimate takes 7 x + 1 KB from a sample of the plan's first items (9-15 % above
those measures: a model's answer can be longer than its prompt).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import redis

MB = 1024 * 1024  # Redis reads "20mb" as 20 MiB
PER_ITEM_FACTOR = 7.0
PER_ITEM_BYTES = 1000


def run_bytes(total: int, sample_sizes: Iterable[int]) -> int:
    """Bytes a run of ``total`` items needs in Redis, from the sizes of some items' JSON + key."""
    sizes = list(sample_sizes)
    avg = sum(sizes) / len(sizes) if sizes else 300.0
    return int(total * (PER_ITEM_FACTOR * avg + PER_ITEM_BYTES))


def memory(r: redis.Redis) -> dict[str, Any] | None:
    """used_memory, maxmemory and the policy; None when INFO is not allowed (an ACL)."""
    try:
        info = r.info("memory")
    except redis.exceptions.RedisError:
        return None
    return {"used": int(info.get("used_memory", 0)), "max": int(info.get("maxmemory", 0)),
            "policy": str(info.get("maxmemory_policy", "?"))}


def mb(n: float) -> str:
    return f"{n / MB:.1f} MB"


def no_room(r: redis.Redis, total: int, need: int) -> str | None:
    """Why a run of ``total`` items needing ``need`` bytes does not fit, or None if it does (or
    Redis has no maxmemory: then the host's memory is the limit, which Redis does not report)."""
    m = memory(r)
    if m is None or not m["max"]:
        return None
    free = m["max"] - m["used"]
    if need <= free:
        return None
    suggest = math.ceil((m["used"] + need) * 1.25 / (16 * MB)) * 16
    return (f"this run needs about {mb(need)} in Redis ({total:,} items: the plan, the results and the "
            f"report), and Redis has {mb(max(free, 0))} free (used {mb(m['used'])} of maxmemory {mb(m['max'])}, "
            f"policy {m['policy']}); raise maxmemory (redis-cli CONFIG SET maxmemory {suggest}mb), free memory, "
            "or run fewer items (--tag, --case, a smaller dataset)")


def full(r: redis.Redis) -> str | None:
    """A one-line description of a Redis at its memory limit, or None if it has room. Near the
    limit counts: writes fail while memory hovers around it (each ack frees a little, the next
    write takes it back)."""
    m = memory(r)
    if m is None or not m["max"] or m["used"] < m["max"] * 0.95:
        return None
    return (f"Redis is at its memory limit (used {mb(m['used'])} of maxmemory {mb(m['max'])}, "
            f"policy {m['policy']})")


def is_oom(exc: BaseException) -> bool:
    """A write refused because Redis reached maxmemory (alone, in a pipeline or in a MULTI)."""
    if isinstance(exc, getattr(redis.exceptions, "OutOfMemoryError", ())):
        return True
    text = str(exc)
    return isinstance(exc, redis.exceptions.ResponseError) and (
        "OOM" in text or "maxmemory" in text or isinstance(exc, redis.exceptions.ExecAbortError))
