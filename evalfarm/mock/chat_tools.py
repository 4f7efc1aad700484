"""OpenAI chat completions with tools (opencode) and aider's SEARCH/REPLACE text edits, in front of the eval chat server."""
from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aiohttp import web

from .script import find_cwd, schema_args, whole_lines
from .sse import SSE


class ChatToolsProtocol:
    """Mixed into ``AgentProtocols`` (mock/agents.py): uses its ``script``, ``_pick`` and ``_record``."""

    @web.middleware
    async def _chat_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            return await handler(request)
        try:
            body = await request.json()
        except ValueError:
            return await handler(request)
        if not isinstance(body, dict):
            return await handler(request)
        system = " ".join(str(m.get("content")) for m in body.get("messages") or []
                          if isinstance(m, dict) and m.get("role") == "system")
        if body.get("tools"):
            return await self._chat_tools(request, body)
        if "SEARCH/REPLACE" in system:
            return await self._chat_aider(request, body)
        return await handler(request)  # an ordinary eval request: MockProvider's own behaviour

    async def _chat_tools(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        messages = body.get("messages") or []
        n = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
        offered = {t["function"].get("name"): t["function"].get("parameters") for t in body["tools"]
                   if isinstance(t, dict) and isinstance(t.get("function"), dict)}
        try:
            index, step, tool = self._pick(n, offered)
        except LookupError as exc:
            return web.json_response({"error": {"message": str(exc), "type": "invalid_request_error"}}, status=400)
        call = None
        if tool:
            call = {"id": "call_" + uuid.uuid4().hex[:12], "type": "function", "function": {
                "name": tool, "arguments": json.dumps(schema_args(offered[tool], step, find_cwd(body)))}}
        self._record(request, "chat", body, index, step.kind, step.usage, n)
        return await self._chat_reply(request, body, None if call else step.text, call, step.usage)

    async def _chat_aider(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """aider has no tools: every edit step becomes a SEARCH/REPLACE block in one reply, then the text."""
        cwd = find_cwd(body)
        blocks = []
        for s in self.script.steps:
            if s.kind == "edit":  # aider searches whole lines: the lines holding `old`, when the mock can read them
                search, replace = whole_lines(s, cwd) or (s.old, s.new)
                blocks.append(f"{s.path}\n```\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n")
        says = [s.text for s in self.script.steps if s.kind == "say"]
        text = "\n".join(blocks + says[-1:]) or "Done."
        first_edit = next((i for i, s in enumerate(self.script.steps) if s.kind == "edit"), 0)
        usage = self.script.steps[first_edit].usage
        self._record(request, "chat-aider", body, first_edit, "edit" if blocks else "say", usage, 0)
        return await self._chat_reply(request, body, text, None, usage)

    async def _chat_reply(self, request: web.Request, body: dict[str, Any], text: str | None,
                          call: dict[str, Any] | None, usage_in: tuple[int, int]) -> web.StreamResponse:
        usage = {"prompt_tokens": usage_in[0], "completion_tokens": usage_in[1], "total_tokens": sum(usage_in)}
        finish = "tool_calls" if call else "stop"
        base = {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "created": int(time.time()), "model": body.get("model", "mock")}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if call:
                message["tool_calls"] = [call]
            return web.json_response({**base, "object": "chat.completion", "usage": usage,
                                      "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        chunk = {**base, "object": "chat.completion.chunk"}
        sse = await SSE.open(request)
        await sse.send({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                              "finish_reason": None}]})
        if text:
            await sse.send({**chunk, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
        if call:
            await sse.send({**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **call}]},
                                                  "finish_reason": None}]})
        await sse.send({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        await sse.send({**chunk, "choices": [], "usage": usage})
        await sse.send_raw("data: [DONE]\n\n")
        return await sse.close()
