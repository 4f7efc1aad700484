"""Gemini generateContent / streamGenerateContent (Gemini CLI): POST /v1beta/models/M:call."""
from __future__ import annotations

import json
import uuid
from typing import Any

from aiohttp import web

from .script import Step, find_cwd, json_instance, schema_args
from .sse import SSE


class GeminiProtocol:
    """Mixed into ``AgentProtocols`` (mock/agents.py): uses its ``script``, ``_pick`` and ``_record``."""

    async def gemini(self, request: web.Request) -> web.StreamResponse:
        call = request.match_info["call"]
        body = await self._body(request)
        if call.endswith(":countTokens"):
            self._record(request, "gemini", body, None, "count_tokens", (0, 0), 0)
            return web.json_response({"totalTokens": self.script.side_usage[0]})
        if not call.endswith((":streamGenerateContent", ":generateContent")):
            return await self.unknown(request)
        contents = body.get("contents") or []
        n = sum(1 for c in contents if isinstance(c, dict) for p in c.get("parts") or []
                if isinstance(p, dict) and "functionResponse" in p)
        offered = {d.get("name"): d.get("parameters") or d.get("parametersJsonSchema")
                   for t in body.get("tools") or [] if isinstance(t, dict)
                   for d in t.get("functionDeclarations") or [] if isinstance(d, dict)}
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if not offered and (schema or config.get("responseMimeType") == "application/json"):
            parts: list[dict[str, Any]] = [{"text": json.dumps(json_instance(schema or {"type": "object"}))}]
            index, step = None, Step("say", 0, self.script.side_usage)
        else:
            try:
                index, step, tool = self._pick(n, offered)
            except LookupError as exc:
                return web.json_response({"error": {"code": 400, "message": str(exc)}}, status=400)
            parts = ([{"functionCall": {"name": tool, "args": schema_args(offered[tool], step, find_cwd(body))}}]
                     if tool else [{"text": step.text}])
        self._record(request, "gemini", {**body, "model": call.split(":")[0]}, index, step.kind, step.usage, n)
        reply = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": step.usage[0], "candidatesTokenCount": step.usage[1],
                                   "totalTokenCount": sum(step.usage)},
                 "modelVersion": call.split(":")[0], "responseId": uuid.uuid4().hex[:16]}
        if call.endswith(":generateContent"):
            return web.json_response(reply)
        sse = await SSE.open(request)
        await sse.send(reply)
        return await sse.close()
