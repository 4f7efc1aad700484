"""The coding agents' wire protocols for `evalfarm mock-provider --agent-script FILE`.

Real agent CLIs (Claude Code, Codex CLI, Gemini CLI, aider, opencode) run offline against this server
and make a real edit through their own tools. Four protocols, one module each:

    POST /v1/messages                                  Anthropic Messages, streamed (claude)
    POST /v1/responses                                 OpenAI Responses API as SSE (codex)
    POST /v1/chat/completions  with tools              OpenAI chat with tool calls (opencode)
    POST /v1/chat/completions  aider's SEARCH/REPLACE  the edits as text blocks (aider)
    POST /v1beta/models/M:streamGenerateContent        Gemini (gemini)

The script (YAML) is a list of steps: ``read: FILE``, ``edit: {file, old, new}``, ``shell: CMD`` and
``say: TEXT``, each with optional ``usage: {input_tokens, output_tokens}``. The reply to a request is
chosen statelessly from how many tool results the request already holds (step N answers a request
holding N results), so retries and side requests (titles, next-speaker checks) never desynchronise
it. Each agent gets the step in its own tool vocabulary; argument names are taken from the tool
schema the agent sent. Relative paths become absolute under the working directory the agent states
in its prompt.

Every request is recorded with the usage figures sent back (GET /agent-log; ``?grep=TEXT`` adds
whether the request body holds TEXT), so tests compare what an agent reports with what it was sent.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .anthropic import AnthropicProtocol
from .chat_tools import ChatToolsProtocol
from .gemini import GeminiProtocol
from .responses import ResponsesProtocol
from .script import TOOL_NAMES, AgentScript, Step


@dataclass
class AgentProtocols(AnthropicProtocol, ResponsesProtocol, ChatToolsProtocol, GeminiProtocol):
    """Handlers for the agents' protocols, attached to MockProvider's aiohttp app."""

    script: AgentScript
    log: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[str] = field(default_factory=list)

    def attach(self, app: web.Application) -> None:
        app.middlewares.append(self._chat_middleware)
        app.router.add_post("/v1/messages", self.anthropic)
        app.router.add_post("/v1/messages/count_tokens", self.anthropic_count)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/responses", self.responses)
        app.router.add_post("/v1beta/models/{call}", self.gemini)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/models", self.models)
        app.router.add_get("/agent-log", self.agent_log)
        app.router.add_route("*", "/{tail:.*}", self.unknown)

    def _record(self, request: web.Request, protocol: str, body: Any, step: int | None, kind: str,
                usage: tuple[int, int], n_results: int) -> None:
        self.log.append({"seq": len(self.log), "ts": round(time.time(), 3), "method": request.method,
                         "path": request.path, "protocol": protocol,
                         "model": body.get("model") if isinstance(body, dict) else None,
                         "step": step, "kind": kind, "tool_results": n_results,
                         "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
                         "key": _key_of(request)})
        self.bodies.append(json.dumps(body))
        self.log[-1]["body_chars"] = len(self.bodies[-1])  # what the agent sent: its context, measured

    async def agent_log(self, request: web.Request) -> web.Response:
        grep = request.query.get("grep")
        entries = [dict(e, grep=grep in b) if grep else e for e, b in zip(self.log, self.bodies)]
        return web.json_response(entries)

    async def unknown(self, request: web.Request) -> web.Response:
        self._record(request, "unknown", {}, None, "404", (0, 0), 0)
        return web.json_response({"error": {"message": "not found", "type": "not_found"}}, status=404)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "mock"}]})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise web.HTTPBadRequest(text="expected a JSON body") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="expected a JSON object")
        return body

    def _pick(self, n_results: int, offered: dict[str, dict[str, Any] | None]) -> tuple[int | None, Step, str | None]:
        """(step index or None for a side request, step, tool name) for a request offering ``offered``."""
        if not offered:
            return None, Step("say", 0, self.script.side_usage, text="ok"), None
        index, step = self.script.step(n_results)
        if step.kind == "say":
            return index, step, None
        name = next((n for n in TOOL_NAMES[step.kind] if n in offered), None)
        if name is None:
            raise LookupError(f"step {index} ({step.kind}) needs one of {TOOL_NAMES[step.kind]}; "
                              f"the agent offered {sorted(offered)}")
        return index, step, name


def _key_of(request: web.Request) -> str | None:
    """The key the request carried, whichever way its protocol sends it (the sealed-agent tests check
    that only the real one, from the relay, ever arrives)."""
    auth = request.headers.get("Authorization") or ""
    return (request.headers.get("x-api-key") or request.headers.get("x-goog-api-key") or request.query.get("key")
            or (auth[7:] if auth.lower().startswith("bearer ") else auth) or None)
