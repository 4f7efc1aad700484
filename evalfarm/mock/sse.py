"""Server-sent events, as the streamed agent protocols send them."""
from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class SSE:
    """A server-sent-events response: ``event:`` lines when named, one JSON ``data:`` line each."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    @classmethod
    async def open(cls, request: web.Request) -> SSE:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        return cls(response)

    async def send(self, data: dict[str, Any], event: str | None = None) -> None:
        await self.send_raw((f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n")

    async def send_raw(self, text: str) -> None:
        await self.response.write(text.encode())

    async def close(self) -> web.StreamResponse:
        await self.response.write_eof()
        return self.response
