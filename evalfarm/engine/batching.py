"""What batching needs from the engine: the item a call belongs to (a batch request carries its item's key
as ``custom_id``, so the answer maps back without trusting order), and how requests are split into
batches within a provider's stated limits. Pure: no HTTP, no clock."""
from __future__ import annotations

from contextvars import ContextVar
from typing import Iterable, Iterator

CURRENT_KEY: ContextVar[str | None] = ContextVar("evalfarm_item_key", default=None)
JUDGE_PREFIX = "judge-"  # a judge call's custom_id: the prefix and the first 58 hex digits of its item's key


def judge_id(key: str) -> str:
    """The custom_id of an item's judge call (64 characters at most, as Anthropic allows)."""
    return JUDGE_PREFIX + key[: 64 - len(JUDGE_PREFIX)]


def split(lines: Iterable[tuple[str, bytes]], max_requests: int, max_bytes: int) -> Iterator[list[tuple[str, bytes]]]:
    """Consecutive groups of (custom_id, line) with at most ``max_requests`` lines and ``max_bytes`` bytes
    each; a line larger than ``max_bytes`` alone is a group of one (the provider refuses it, the caller
    sends it live)."""
    group: list[tuple[str, bytes]] = []
    size = 0
    for cid, line in lines:
        if group and (len(group) >= max_requests or size + len(line) > max_bytes):
            yield group
            group, size = [], 0
        group.append((cid, line))
        size += len(line)
    if group:
        yield group


def fits(count: int, size: int, line: int, max_requests: int, max_bytes: int) -> bool:
    """Whether one more line of ``line`` bytes fits a batch holding ``count`` lines of ``size`` bytes."""
    return count + 1 <= max_requests and size + line <= max_bytes
