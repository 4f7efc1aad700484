"""Which items of a run are still in the broker: queued, or delivered but unacknowledged.

`resume` re-dispatches only items that are neither finished, nor waiting for
the judge, nor still in a queue or in a worker's hands: reading kombu's Redis
lists and its ``unacked`` hash tells exactly which those are.
"""
from __future__ import annotations

import base64
import json
from typing import Any, Iterator

from .messages import BATCH_POLL, QUEUES

PRIORITY_SEP = "\x06\x16"


def _decode(raw: bytes | str) -> dict[str, Any] | None:
    try:
        msg = json.loads(raw)
        if isinstance(msg, list):  # the unacked hash stores [message, exchange, routing_key]
            msg = msg[0]
        body = msg["body"]
        if msg.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return {"task": msg.get("headers", {}).get("task"), "args": args}
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _messages(r) -> Iterator[tuple[bool, dict[str, Any]]]:
    """(unacked?, message) for every message in a queue or in a worker's hands."""
    for queue in QUEUES:
        for key in [queue] + [f"{queue}{PRIORITY_SEP}{p}" for p in (1, 2, 3, 4, 5, 6, 7, 8, 9)]:
            for raw in r.lrange(key, 0, -1):
                m = _decode(raw)
                if m:
                    yield False, m
    for raw in r.hvals("unacked"):
        m = _decode(raw)
        if m:
            yield True, m


def scan(r, run_id: str) -> tuple[set[str], set[str], int, int]:
    """(item keys in this run's queued batch messages, in its unacked ones, aggregate messages, provider
    batch polls). A ``batch_poll`` carries a provider batch's id, not an aggregate: counted apart, so a run
    waiting on open provider batches does not look like one with aggregates queued."""
    queued: set[str] = set()
    unacked: set[str] = set()
    aggregates = polls = 0
    for in_hands, m in _messages(r):
        args = m["args"]
        if not args or args[0] != run_id:
            continue
        if m["task"] == BATCH_POLL:
            polls += 1
        elif len(args) > 1 and isinstance(args[1], list):
            (unacked if in_hands else queued).update(args[1])
        else:
            aggregates += 1
    return queued, unacked, aggregates, polls


def broker_keys(r, run_id: str) -> tuple[set[str], set[str], int]:
    """(item keys in this run's queued batch messages, in its unacked ones, aggregate messages)."""
    return scan(r, run_id)[:3]


def keys_in_broker(r, run_id: str) -> tuple[set[str], int]:
    """(item keys carried by this run's queued or unacked batch messages, aggregate messages)."""
    queued, unacked, aggregates = broker_keys(r, run_id)
    return queued | unacked, aggregates


def queued_per_queue(r, run_id: str, queues=QUEUES) -> dict[str, int]:
    """Messages of ``run_id`` waiting on each queue (not yet taken by a worker)."""
    out: dict[str, int] = {}
    for queue in queues:
        for key in [queue] + [f"{queue}{PRIORITY_SEP}{p}" for p in (1, 2, 3, 4, 5, 6, 7, 8, 9)]:
            for raw in r.lrange(key, 0, -1):
                m = _decode(raw)
                if m and m["args"] and m["args"][0] == run_id:
                    out[queue] = out.get(queue, 0) + 1
    return out


def consumed_queues(r) -> set[str] | None:
    """The queues live workers consume (their heartbeat keys, ``ef:worker:*``); None if unreadable."""
    out: set[str] = set()
    try:
        for key in r.scan_iter(match="ef:worker:*", count=500):
            raw = r.get(key)
            if raw:
                out.update(json.loads(raw).get("queues") or [])
    except (ValueError, TypeError, AttributeError):
        return None
    return out


def broker_segments(r, run_id: str) -> tuple[set[int], set[int]]:
    """(segments of an archived run in queued batch messages, in unacknowledged ones): such a message
    is ``[run_id, [], seg]``, the items being on the archive (a ``batch_poll``'s ``[run_id, batch id, attempt]``
    is not one)."""
    queued: set[int] = set()
    unacked: set[int] = set()
    for in_hands, m in _messages(r):
        args = m["args"]
        if len(args) > 2 and args[0] == run_id and isinstance(args[2], int) and m["task"] != BATCH_POLL:
            (unacked if in_hands else queued).add(args[2])
    return queued, unacked
