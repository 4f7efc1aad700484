"""What every batch API client is: the ``BatchClient`` contract, a batch's state and a line's result, the
stated limits. The wire of each API is in batch_openai.py and batch_anthropic.py; the batching in batches.py."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from ..envvars import env_float, env_int


@dataclass(frozen=True)
class BatchLimits:
    """What one batch may hold. The providers state 50,000 requests and 200 MB (OpenAI) and 100,000
    requests and 256 MB (Anthropic); ``EVALFARM_BATCH_MAX_REQUESTS``/``_MAX_BYTES`` lower them."""

    max_requests: int
    max_bytes: int
    linger_s: float = 2.0
    poll_s: float = 2.0
    poll_max_s: float = 60.0

    @classmethod
    def for_provider(cls, max_requests: int, max_bytes: int) -> "BatchLimits":
        return cls(min(max_requests, env_int("EVALFARM_BATCH_MAX_REQUESTS", max_requests, 1, max_requests)),
                   min(max_bytes, env_int("EVALFARM_BATCH_MAX_BYTES", max_bytes, 1024, max_bytes)),
                   env_float("EVALFARM_BATCH_LINGER_S", 2.0, 0.0, 3600.0),
                   env_float("EVALFARM_BATCH_POLL_S", 2.0, 0.01, 3600.0),
                   env_float("EVALFARM_BATCH_POLL_MAX_S", 60.0, 0.01, 3600.0))


@dataclass
class BatchState:
    id: str
    ended: bool
    status: str  # the provider's word: in_progress, completed, expired, cancelled, ended, ...
    counts: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class LineResult:
    kind: str  # "ok", "error", "expired", "cancelled"
    body: Any = None  # the provider's answer to this line (ok), or the error message


class BatchClient(Protocol):
    kind: str
    limits: BatchLimits

    def line(self, custom_id: str, body: bytes) -> bytes:
        """One request of a batch as this API writes it (a JSONL line with its newline)."""

    async def submit(self, lines: list[bytes], metadata: dict[str, str]) -> BatchState: ...

    async def get(self, batch_id: str) -> BatchState: ...

    async def results(self, state: BatchState) -> dict[str, LineResult]: ...

    async def cancel(self, batch_id: str) -> BatchState: ...

    async def list(self, limit: int = 100) -> list[BatchState]: ...

    async def aclose(self) -> None: ...


def dumps_line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


async def list_pages(fetch: Callable[[str | None], Awaitable[dict[str, Any]]],
                     state: Callable[[dict[str, Any]], BatchState], limit: int) -> list[BatchState]:
    """Both APIs page their batch list alike (``data``, ``has_more``, ``last_id``); ``fetch(after)`` asks
    for the page after that id (None: the first) in its API's own words."""
    out: list[BatchState] = []
    after = None
    while len(out) < limit:
        page = await fetch(after)
        out += [state(b) for b in page.get("data") or [] if isinstance(b, dict)]
        if not page.get("has_more") or not page.get("last_id"):
            break
        after = page["last_id"]
    return out[:limit]
