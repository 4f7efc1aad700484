"""Anthropic Messages (Claude Code): POST /v1/messages, streamed or not, and count_tokens."""
from __future__ import annotations

import json
import uuid

from aiohttp import web

from .script import find_cwd, schema_args
from .sse import SSE


class AnthropicProtocol:
    """Mixed into ``AgentProtocols`` (mock/agents.py): uses its ``script``, ``_pick`` and ``_record``."""

    async def anthropic_count(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        self._record(request, "anthropic", body, None, "count_tokens", (0, 0), 0)
        return web.json_response({"input_tokens": self.script.side_usage[0]})

    async def anthropic(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        n = sum(1 for m in body.get("messages") or [] if m.get("role") == "user" and isinstance(m.get("content"), list)
                for c in m["content"] if isinstance(c, dict) and c.get("type") == "tool_result")
        offered = {t.get("name"): t.get("input_schema") for t in body.get("tools") or [] if isinstance(t, dict)}
        try:
            index, step, tool = self._pick(n, offered)
        except LookupError as exc:
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": str(exc)}}, status=400)
        if tool:
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:16], "name": tool,
                     "input": schema_args(offered[tool], step, find_cwd(body))}
            stop = "tool_use"
        else:
            block, stop = {"type": "text", "text": step.text}, "end_turn"
        self._record(request, "anthropic", body, index, step.kind, step.usage, n)
        usage = {"input_tokens": step.usage[0], "output_tokens": step.usage[1],
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        message = {"id": "msg_" + uuid.uuid4().hex[:16], "type": "message", "role": "assistant",
                   "model": body.get("model", "mock"), "stop_sequence": None}
        if not body.get("stream"):
            return web.json_response({**message, "content": [block], "stop_reason": stop, "usage": usage})
        sse = await SSE.open(request)
        await sse.send({"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                             "usage": {**usage, "output_tokens": 1}}}, "message_start")
        if block["type"] == "text":
            await sse.send({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                           "content_block_start")
            await sse.send({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": block["text"]}}, "content_block_delta")
        else:
            await sse.send({"type": "content_block_start", "index": 0,
                            "content_block": {**block, "input": {}}}, "content_block_start")
            await sse.send({"type": "content_block_delta", "index": 0, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}, "content_block_delta")
        await sse.send({"type": "content_block_stop", "index": 0}, "content_block_stop")
        await sse.send({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": step.usage[1]}}, "message_delta")
        await sse.send({"type": "message_stop"}, "message_stop")
        return await sse.close()
