"""An agent item's trajectory (agents/trajectory.py) as Inspect AI transcript events, so Inspect's viewer
shows what the agent did: a ``model`` event per model call (its reply's text and tool calls, its usage;
the request is not stored, so ``input`` is empty) and a ``tool`` event per tool call (its arguments and
result; a cut result says so in ``truncated``, an error result in ``error``). A Codex turn's summary
(usage per turn) and anything the event types cannot hold go to ``info`` events. Written from Inspect's
event models (inspect_ai/event/_model.py, _tool.py, _info.py); evalfarm does not import Inspect.
"""
from __future__ import annotations

from typing import Any


def _usage(s: dict[str, Any]) -> dict[str, Any] | None:
    tin, tout = s.get("input_tokens"), s.get("output_tokens")
    if not isinstance(tin, int) and not isinstance(tout, int):
        return None
    tin, tout = tin if isinstance(tin, int) else 0, tout if isinstance(tout, int) else 0
    out: dict[str, Any] = {"input_tokens": tin, "output_tokens": tout, "total_tokens": tin + tout}
    if isinstance(s.get("cached_input_tokens"), int) and s["cached_input_tokens"]:
        out["input_tokens_cache_read"] = s["cached_input_tokens"]
    if isinstance(s.get("cost_usd"), (int, float)) and s["cost_usd"]:
        out["total_cost"] = s["cost_usd"]
    return out


def _base(kind: str, timestamp: Any, fallback: str) -> dict[str, Any]:
    return {"event": kind, "timestamp": timestamp if isinstance(timestamp, str) and timestamp else fallback,
            "working_start": 0.0}


class _Model:
    def __init__(self, s: dict[str, Any] | None, model: str, fallback: str) -> None:
        s = s or {}
        self.event = {**_base("model", s.get("timestamp"), fallback), "model": str(s.get("model") or model),
                      "input": [], "tools": [], "tool_choice": "auto", "config": {}}
        meta = {k: s[k] for k in ("seen_by", "latency_ms", "status", "relay") if s.get(k) is not None}
        if meta:
            self.event["metadata"] = meta
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.usage = _usage(s)

    def close(self) -> dict[str, Any]:
        message = {"role": "assistant", "content": "\n".join(self.text), "source": "generate",
                   "model": self.event["model"]}
        if self.calls:
            message["tool_calls"] = self.calls
        output: dict[str, Any] = {"model": self.event["model"], "choices": [
            {"message": message, "stop_reason": "tool_calls" if self.calls else "stop"}]}
        if self.usage:
            output["usage"] = self.usage
        self.event["output"] = output
        return self.event


def events(trajectory: dict[str, Any], model: str, fallback_time: str) -> list[dict[str, Any]]:
    """The trajectory's steps as Inspect events, in order."""
    out: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    current: _Model | None = None
    models: list[_Model] = []
    for s in trajectory.get("steps") or []:
        if not isinstance(s, dict):
            continue
        src, ts = s.get("source"), s.get("timestamp")
        if src == "model_call" and s.get("scope") == "turn":
            out.append({**_base("info", ts, fallback_time), "source": "evalfarm",
                        "data": {"turn_usage": _usage(s), "note": "the agent reports its usage per turn"}})
        elif src == "model_call":
            current = _Model(s, model, fallback_time)
            models.append(current)
            out.append(current.event)
        elif src == "agent":
            if s.get("thinking"):
                out.append({**_base("info", ts, fallback_time), "source": "agent reasoning",
                            "data": str(s.get("text") or "")})
                continue
            if current is None:
                current = _Model(None, model, fallback_time)
                models.append(current)
                out.append(current.event)
            current.text.append(str(s.get("text") or ""))
        elif src == "tool_call":
            cid = str(s.get("tool_call_id") or f"call-{s.get('index')}")
            args = s.get("arguments") if isinstance(s.get("arguments"), dict) else {"value": s.get("arguments")}
            if current is None:
                current = _Model(None, model, fallback_time)
                models.append(current)
                out.append(current.event)
            current.calls.append({"id": cid, "function": str(s.get("name") or "?"), "arguments": args,
                                  "type": "function"})
            tool = {**_base("tool", ts, fallback_time), "type": "function", "id": cid,
                    "function": str(s.get("name") or "?"), "arguments": args, "result": "", "events": []}
            tools[cid] = tool
            out.append(tool)
        elif src == "tool_result":
            cid = str(s.get("tool_call_id") or "")
            tool = tools.get(cid)
            if tool is None:  # a result without a call (aider's own output lines)
                tool = {**_base("tool", ts, fallback_time), "type": "function", "id": cid or f"result-{s.get('index')}",
                        "function": str(s.get("name") or "output"), "arguments": {}, "events": []}
                out.append(tool)
            content = str(s.get("content") or "")
            tool["result"] = content
            cut = s.get("cut") if isinstance(s.get("cut"), dict) else None
            if cut and isinstance(cut.get("original_chars"), int):
                tool["truncated"] = [cut["original_chars"], cut.get("kept_chars") or len(content)]
            if s.get("is_error"):
                tool["error"] = {"type": "unknown", "message": content[:2000] or "error"}
            if isinstance(ts, str) and ts:
                tool["completed"] = ts
    for m in models:
        m.close()  # its event, already in ``out``, gets its output
    return out
