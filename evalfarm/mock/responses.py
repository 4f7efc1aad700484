"""The OpenAI Responses API as SSE (Codex CLI): POST /v1/responses, tool calls as function, custom or shell calls.

An edit step becomes an apply_patch of the whole lines holding ``old`` (script.whole_lines), or, when the
mock cannot read the file or Codex offers no apply_patch, the shell form of the same replacement."""
from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aiohttp import web

from .script import TOOL_RESULT_TYPES, Step, find_cwd, quote, schema_args, shell_edit, whole_lines
from .sse import SSE


class ResponsesProtocol:
    """Mixed into ``AgentProtocols`` (mock/agents.py): uses its ``script``, ``_pick`` and ``_record``."""

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        items_in = body.get("input") if isinstance(body.get("input"), list) else []
        n = sum(1 for i in items_in if isinstance(i, dict) and i.get("type") in TOOL_RESULT_TYPES)
        tools = {(t.get("name") or t.get("type")): t for t in body.get("tools") or [] if isinstance(t, dict)}
        index, step = self.script.step(n)
        cwd = find_cwd(body)
        item = self._codex_item(step, tools, cwd)
        self._record(request, "responses", body, index, step.kind, step.usage, n)
        usage = {"input_tokens": step.usage[0], "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": step.usage[1], "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": sum(step.usage)}
        resp = {"id": "resp_" + uuid.uuid4().hex[:16], "object": "response", "created_at": int(time.time()),
                "status": "in_progress", "model": body.get("model", "mock"), "output": []}
        sse = await SSE.open(request)
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
        lines = whole_lines(step, cwd) if step.kind == "edit" else None
        if lines is not None and "apply_patch" in tools:
            # apply_patch replaces whole lines (and matches them ignoring surrounding blanks): give it the
            # lines that hold `old`, so the rest of each line (indentation first) stays as it was
            patch = "*** Begin Patch\n*** Update File: {}\n@@\n{}\n{}\n*** End Patch\n".format(
                step.path, "\n".join("-" + x for x in lines[0].split("\n")),
                "\n".join("+" + x for x in lines[1].split("\n")))
            if tools["apply_patch"].get("type") == "custom":  # the freeform (grammar) tool
                return {"type": "custom_tool_call", "id": "ctc_" + call_id, "call_id": call_id,
                        "name": "apply_patch", "input": patch}
            return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": "apply_patch",
                    "arguments": json.dumps({"input": patch})}
        if step.kind in ("read", "edit", "shell"):  # codex reads (and edits without apply_patch) via its shell
            command = step.command
            if step.kind == "read":
                command = f"cat {quote(step.path)}"
            elif step.kind == "edit":
                command = shell_edit(step)
            shell = Step("shell", step.line, step.usage, command=command)
            name = next((n for n in ("exec_command", "shell_command", "shell") if n in tools), None)
            if name is None:
                return _codex_message(f"mock: no shell tool among {sorted(tools)}")
            return {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id, "name": name,
                    "arguments": json.dumps(schema_args(tools[name].get("parameters"), shell, cwd))}
        return _codex_message(step.text)


def _codex_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "id": "msg_" + uuid.uuid4().hex[:12],
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
