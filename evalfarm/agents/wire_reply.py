"""What a model reply said, read from its bytes as the relay saw them (model_relay.py keeps each reply's
head): its text and the tool calls it asked for, in any of the four protocols the agents speak
(Anthropic Messages, OpenAI chat and Responses, Gemini), streamed (SSE) or whole.

This is how a trajectory gets its steps when the agent's own output has none (Gemini CLI's one JSON
report, a ``command:`` agent, a CLI that crashed). Pure and forgiving: a reply cut at the relay's
limit or in an unknown shape gives what could be read, never an exception.
"""
from __future__ import annotations

import json
from typing import Any


def _events(content_type: str, body: bytes) -> list[Any]:
    text = body.decode("utf-8", "replace")
    stripped = text.lstrip()
    if "event-stream" in content_type or stripped.startswith(("event:", "data:")):
        out = []
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("data:"):
                try:
                    out.append(json.loads(line[5:].strip()))
                except ValueError:
                    continue
        return out
    try:
        whole = json.loads(stripped)
    except ValueError:
        return [json.loads(line) for line in stripped.splitlines() if _is_json(line)]
    return whole if isinstance(whole, list) else [whole]  # Gemini's streamGenerateContent without SSE: a list


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"_raw": raw}
    return raw if raw is not None else {}


class _Reply:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[str, dict[str, Any]] = {}  # by stream index or id, in arrival order

    def call(self, slot: str, **fields: Any) -> dict[str, Any]:
        c = self.calls.setdefault(slot, {"id": None, "name": None, "arguments": "", "_parts": True})
        for k, v in fields.items():
            if v:
                c[k] = v
        return c

    def whole_call(self, slot: str, call_id: Any, name: Any, arguments: Any) -> None:
        self.calls[slot] = {"id": call_id, "name": name, "arguments": _args(arguments), "_parts": False}

    def result(self) -> dict[str, Any]:
        calls = []
        for c in self.calls.values():
            args = _args(c["arguments"]) if c.pop("_parts") else c["arguments"]
            calls.append({"id": c["id"], "name": c["name"], "arguments": args})
        return {"text": "".join(self.text), "tool_calls": [c for c in calls if c["name"]]}


def _anthropic(e: dict[str, Any], r: _Reply) -> None:
    kind = e.get("type")
    if kind == "message":  # whole
        for i, b in enumerate(e.get("content") or []):
            if isinstance(b, dict) and b.get("type") == "text":
                r.text.append(str(b.get("text") or ""))
            elif isinstance(b, dict) and b.get("type") == "tool_use":
                r.whole_call(f"a{i}", b.get("id"), b.get("name"), b.get("input"))
    elif kind == "content_block_start":
        b = e.get("content_block") or {}
        if b.get("type") == "tool_use":
            r.call(f"a{e.get('index')}", id=b.get("id"), name=b.get("name"))
        elif b.get("type") == "text" and b.get("text"):
            r.text.append(str(b["text"]))
    elif kind == "content_block_delta":
        d = e.get("delta") or {}
        if d.get("type") == "text_delta":
            r.text.append(str(d.get("text") or ""))
        elif d.get("type") == "input_json_delta":
            r.call(f"a{e.get('index')}")["arguments"] += str(d.get("partial_json") or "")


def _chat(e: dict[str, Any], r: _Reply) -> None:
    for ch in e.get("choices") or []:
        if not isinstance(ch, dict):
            continue
        m = ch.get("message") or ch.get("delta") or {}
        if isinstance(m.get("content"), str):
            r.text.append(m["content"])
        for j, tc in enumerate(m.get("tool_calls") or []):
            fn = tc.get("function") or {}
            slot = f"c{tc.get('index', j)}"
            if "message" in ch:
                r.whole_call(slot, tc.get("id"), fn.get("name"), fn.get("arguments"))
            else:
                r.call(slot, id=tc.get("id"), name=fn.get("name"))["arguments"] += str(fn.get("arguments") or "")


def _responses_output(items: list[Any], r: _Reply) -> None:
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            continue
        if it.get("type") == "message":
            r.text += [str(c.get("text") or "") for c in it.get("content") or [] if isinstance(c, dict)
                       and c.get("type") == "output_text"]
        elif it.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
            r.whole_call(f"r{it.get('call_id') or i}", it.get("call_id") or it.get("id"), it.get("name") or it["type"],
                         it.get("arguments") if "arguments" in it else it.get("input") or it.get("action"))


def _gemini(e: dict[str, Any], r: _Reply) -> None:
    for cand in e.get("candidates") or []:
        for j, part in enumerate(((cand or {}).get("content") or {}).get("parts") or []):
            if not isinstance(part, dict):
                continue
            if part.get("text") and not part.get("thought"):
                r.text.append(str(part["text"]))
            fc = part.get("functionCall")
            if isinstance(fc, dict):
                r.whole_call(f"g{len(r.calls)}", fc.get("id"), fc.get("name"), fc.get("args"))


def read_reply(content_type: str, body: bytes) -> dict[str, Any]:
    """``{"text", "tool_calls": [{"id", "name", "arguments"}]}`` of one reply."""
    r = _Reply()
    done_responses = False
    for e in _events(content_type or "", body or b""):
        if not isinstance(e, dict):
            continue
        kind = str(e.get("type") or "")
        if kind.startswith(("message", "content_block")):
            _anthropic(e, r)
        elif "choices" in e:
            _chat(e, r)
        elif "candidates" in e:
            _gemini(e, r)
        elif kind == "response.completed" and isinstance(e.get("response"), dict):
            if not done_responses:
                r = _Reply()  # the completed response restates every item: read it alone
                _responses_output(e["response"].get("output") or [], r)
                done_responses = True
        elif kind == "response.output_item.done" and not done_responses:
            _responses_output([e.get("item")], r)
        elif e.get("object") == "response":
            _responses_output(e.get("output") or [], r)
    return r.result()
