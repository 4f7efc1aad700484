"""The coding agents' wire protocols for `evalfarm mock-provider --agent-script FILE`.

Real agent CLIs (Claude Code, Codex CLI, Gemini CLI, aider, opencode) run offline against this server
and make a real edit through their own tools. Four protocols:

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
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

STEP_KINDS = ("read", "edit", "shell", "say")
DEFAULT_USAGE = (123, 45)
TOOL_NAMES = {
    "read": ("Read", "read", "read_file"),
    "edit": ("Edit", "edit", "replace"),
    "shell": ("Bash", "bash", "run_shell_command", "shell_command", "exec_command", "shell"),
}
ARG_NAMES = {
    "path": ("file_path", "filePath", "absolute_path", "path"),
    "old": ("old_string", "oldString", "old_str"),
    "new": ("new_string", "newString", "new_str"),
    "command": ("command", "cmd"),
}
# Where each agent states its working directory in the prompt it sends.
_CWD_PATTERNS = [re.compile(p) for p in (
    r"<cwd>([^<]+)</cwd>",                                   # codex environment_context
    r"[Pp]rimary working directory: (/[^\s\"\\]+)",          # claude
    r"[Ww]orking directory: (/[^\s\"\\]+)",                  # claude, opencode
    r"Workspace Directories:\*\*\\n\s*- (/[^\s\"\\]+)",     # gemini 0.61
    r"working in the directory: (/[^\s\"\\]+)",              # gemini (older)
)]
_TOOL_RESULT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


@dataclass(frozen=True)
class Step:
    kind: str
    line: int
    usage: tuple[int, int]
    path: str = ""
    old: str = ""
    new: str = ""
    command: str = ""
    text: str = ""


@dataclass(frozen=True)
class AgentScript:
    steps: tuple[Step, ...]
    side_usage: tuple[int, int] = DEFAULT_USAGE

    def step(self, n_results: int) -> tuple[int, Step]:
        """The step answering a request that already holds ``n_results`` tool results."""
        if n_results < len(self.steps):
            return n_results, self.steps[n_results]
        last = self.steps[-1]
        if last.kind == "say":
            return len(self.steps) - 1, last
        return len(self.steps), Step("say", last.line, last.usage, text="Done.")


def _usage(value: Any, where: str, default: tuple[int, int]) -> tuple[int, int]:
    if value is None:
        return default
    if (not isinstance(value, dict) or set(value) - {"input_tokens", "output_tokens"}
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values())):
        raise ValueError(f"{where}: usage: expected {{input_tokens: N, output_tokens: N}} (integers >= 0)")
    return int(value.get("input_tokens", default[0])), int(value.get("output_tokens", default[1]))


def load_agent_script(path: Path) -> AgentScript:
    """Parse and validate a script; errors are one line, ``file:line: field: what to do``."""
    import yaml

    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError(f"{path}:{mark.line + 1 if mark else 1}: not valid YAML") from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not data["steps"]:
        raise ValueError(f"{path}:1: steps: expected a mapping with a non-empty list `steps:`")
    unknown = set(data) - {"steps", "usage", "side_usage"}
    if unknown:
        raise ValueError(f"{path}:1: {sorted(unknown)[0]}: unknown key (expected steps, usage, side_usage)")
    default = _usage(data.get("usage"), f"{path}:1", DEFAULT_USAGE)
    side = _usage(data.get("side_usage"), f"{path}:1", default)
    steps_node = next(v for k, v in root.value if k.value == "steps")
    steps = []
    for i, (raw, node) in enumerate(zip(data["steps"], steps_node.value)):
        where = f"{path}:{node.start_mark.line + 1}: steps[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: expected a mapping like {{read: FILE}}")
        kinds = [k for k in raw if k in STEP_KINDS]
        extra = set(raw) - set(STEP_KINDS) - {"usage"}
        if len(kinds) != 1 or extra:
            raise ValueError(f"{where}: expected exactly one of {', '.join(STEP_KINDS)} (and optional usage)")
        kind, arg = kinds[0], raw[kinds[0]]
        usage = _usage(raw.get("usage"), where, default)
        line = node.start_mark.line + 1
        if kind == "edit":
            if not (isinstance(arg, dict) and set(arg) == {"file", "old", "new"}
                    and all(isinstance(v, str) and v for v in (arg["file"], arg["old"])) and isinstance(arg["new"], str)):
                raise ValueError(f"{where}: edit: expected {{file: PATH, old: TEXT, new: TEXT}}")
            steps.append(Step("edit", line, usage, path=arg["file"], old=arg["old"], new=arg["new"]))
        elif not isinstance(arg, str) or not arg:
            raise ValueError(f"{where}: {kind}: expected a non-empty string")
        elif kind == "read":
            steps.append(Step("read", line, usage, path=arg))
        elif kind == "shell":
            steps.append(Step("shell", line, usage, command=arg))
        else:
            steps.append(Step("say", line, usage, text=arg))
    return AgentScript(tuple(steps), side)


# ----------------------------------------------------------------------------- request reading
def _find_cwd(body: Any) -> str | None:
    text = json.dumps(body)
    for pattern in _CWD_PATTERNS:
        m = pattern.search(text)
        if m:
            return m.group(1).replace("\\n", "").rstrip(".,")
    return None


def _abs(path: str, cwd: str | None) -> str:
    return path if path.startswith("/") or not cwd else f"{cwd.rstrip('/')}/{path}"


def _schema_args(schema: dict[str, Any] | None, step: Step, cwd: str | None) -> dict[str, Any]:
    """The step's arguments under the names the agent's tool schema uses; required strings filled."""
    props = (schema or {}).get("properties") or {}
    values = {"path": _abs(step.path, cwd), "old": step.old, "new": step.new, "command": step.command}
    wanted = {"read": ("path",), "edit": ("path", "old", "new"), "shell": ("command",)}[step.kind]
    args: dict[str, Any] = {}
    for key in wanted:
        name = next((n for n in ARG_NAMES[key] if n in props), ARG_NAMES[key][0])
        value: Any = values[key]
        if key == "command" and (props.get(name) or {}).get("type") == "array":
            value = ["bash", "-lc", value]
        args[name] = value
    for name in (schema or {}).get("required") or []:
        if name not in args and (props.get(name) or {}).get("type", "string") == "string":
            args[name] = f"scripted {step.kind} step"
    return args


def _json_instance(schema: dict[str, Any]) -> Any:
    """A minimal value that satisfies a JSON schema (Gemini's structured side calls)."""
    kind = schema.get("type")
    kind = kind.lower() if isinstance(kind, str) else kind
    if "enum" in schema:
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _json_instance(props[k]) for k in (schema.get("required") or props)}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return "scripted"


# ----------------------------------------------------------------------------- the server side
@dataclass
class AgentProtocols:
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
                         "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}})
        self.bodies.append(json.dumps(body))

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

    # --- Anthropic Messages (claude)
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
                     "input": _schema_args(offered[tool], step, _find_cwd(body))}
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
        sse = await _SSE.open(request)
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

    # --- OpenAI Responses (codex)
    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        items_in = body.get("input") if isinstance(body.get("input"), list) else []
        n = sum(1 for i in items_in if isinstance(i, dict) and i.get("type") in _TOOL_RESULT_TYPES)
        tools = {(t.get("name") or t.get("type")): t for t in body.get("tools") or [] if isinstance(t, dict)}
        index, step = self.script.step(n)
        cwd = _find_cwd(body)
        item = self._codex_item(step, tools, cwd)
        self._record(request, "responses", body, index, step.kind, step.usage, n)
        usage = {"input_tokens": step.usage[0], "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": step.usage[1], "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": sum(step.usage)}
        resp = {"id": "resp_" + uuid.uuid4().hex[:16], "object": "response", "created_at": int(time.time()),
                "status": "in_progress", "model": body.get("model", "mock"), "output": []}
        sse = await _SSE.open(request)
        seq = 0

        async def send(kind: str, payload: dict[str, Any]) -> None:
            nonlocal seq
            await sse.send({"type": kind, "sequence_number": seq, **payload}, kind)
            seq += 1

        await send("response.created", {"response": resp})
        await send("response.output_item.added", {"output_index": 0, "item": item})
        if item["type"] == "message":
            await send("response.output_text.delta", {"item_id": item["id"], "output_index": 0, "content_index": 0,
                                                      "delta": item["content"][0]["text"]})
        await send("response.output_item.done", {"output_index": 0, "item": item})
        await send("response.completed", {"response": {**resp, "status": "completed", "output": [item],
                                                       "usage": usage}})
        return await sse.close()

    @staticmethod
    def _codex_item(step: Step, tools: dict[str, dict[str, Any]], cwd: str | None) -> dict[str, Any]:
        call_id = "call_" + uuid.uuid4().hex[:12]
        if step.kind == "edit" and "apply_patch" in tools:
            patch = "*** Begin Patch\n*** Update File: {}\n@@\n{}\n{}\n*** End Patch\n".format(
                step.path, "\n".join("-" + x for x in step.old.split("\n")),
                "\n".join("+" + x for x in step.new.split("\n")))
            if tools["apply_patch"].get("type") == "custom":  # the freeform (grammar) tool
                return {"type": "custom_tool_call", "id": "ctc_" + call_id, "call_id": call_id,
                        "name": "apply_patch", "input": patch}
            return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": "apply_patch",
                    "arguments": json.dumps({"input": patch})}
        if step.kind in ("read", "edit", "shell"):  # codex reads (and edits without apply_patch) via its shell
            command = step.command
            if step.kind == "read":
                command = f"cat {_quote(step.path)}"
            elif step.kind == "edit":
                command = ("python3 -c 'import pathlib,sys; p=pathlib.Path(sys.argv[1]); "
                           "p.write_text(p.read_text().replace(sys.argv[2], sys.argv[3], 1))' "
                           f"{_quote(step.path)} {_quote(step.old)} {_quote(step.new)}")
            shell = Step("shell", step.line, step.usage, command=command)
            name = next((n for n in ("exec_command", "shell_command", "shell") if n in tools), None)
            if name is None:
                return _codex_message(f"mock: no shell tool among {sorted(tools)}")
            return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name,
                    "arguments": json.dumps(_schema_args(tools[name].get("parameters"), shell, cwd))}
        return _codex_message(step.text)

    # --- OpenAI chat completions with tools (opencode) or SEARCH/REPLACE text (aider)
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
                "name": tool, "arguments": json.dumps(_schema_args(offered[tool], step, _find_cwd(body)))}}
        self._record(request, "chat", body, index, step.kind, step.usage, n)
        return await self._chat_reply(request, body, None if call else step.text, call, step.usage)

    async def _chat_aider(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """aider has no tools: every edit step becomes a SEARCH/REPLACE block in one reply, then the text."""
        blocks = [f"{s.path}\n```\n<<<<<<< SEARCH\n{s.old}\n=======\n{s.new}\n>>>>>>> REPLACE\n```\n"
                  for s in self.script.steps if s.kind == "edit"]
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
        sse = await _SSE.open(request)
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

    # --- Gemini generateContent / streamGenerateContent (gemini)
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
            parts: list[dict[str, Any]] = [{"text": json.dumps(_json_instance(schema or {"type": "object"}))}]
            index, step = None, Step("say", 0, self.script.side_usage)
        else:
            try:
                index, step, tool = self._pick(n, offered)
            except LookupError as exc:
                return web.json_response({"error": {"code": 400, "message": str(exc)}}, status=400)
            parts = ([{"functionCall": {"name": tool, "args": _schema_args(offered[tool], step, _find_cwd(body))}}]
                     if tool else [{"text": step.text}])
        self._record(request, "gemini", {**body, "model": call.split(":")[0]}, index, step.kind, step.usage, n)
        reply = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": step.usage[0], "candidatesTokenCount": step.usage[1],
                                   "totalTokenCount": sum(step.usage)},
                 "modelVersion": call.split(":")[0], "responseId": uuid.uuid4().hex[:16]}
        if call.endswith(":generateContent"):
            return web.json_response(reply)
        sse = await _SSE.open(request)
        await sse.send(reply)
        return await sse.close()


def _codex_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "id": "msg_" + uuid.uuid4().hex[:12],
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


class _SSE:
    """A server-sent-events response: ``event:`` lines when named, one JSON ``data:`` line each."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    @classmethod
    async def open(cls, request: web.Request) -> _SSE:
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
