"""What an agent did, step by step: one trajectory per agent task, from the agent's own JSON output.

Parsed from Claude Code's stream-json and Codex's ``exec --json`` events (other agents: no
trajectory yet, ``build`` returns None). Each step has a ``source``:

- ``model_call``: one model reply; Claude Code: ``input_tokens`` per reply (cache reads and writes
  added back), its stream's ``output_tokens`` kept as ``output_tokens_streamed`` (stream-json
  carries the reply's first usage, 1 token, not its final count); Codex: one step per turn with
  the turn's usage (codex reports no per-request figures);
- ``agent``: a message of the model's (text);
- ``tool_call``: ``name`` and ``arguments`` (Claude Code's tool input; Codex's ``exec`` with the
  command, ``apply_patch`` with the changed files, an MCP tool with its arguments);
- ``tool_result``: ``content`` cut at ``TOOL_RESULT_MAX`` characters (``cut`` then says how many
  there were), ``is_error``, ``exit_code`` where known.

``timestamp`` is the agent's own (Claude Code stamps tool results; Codex stamps nothing: None).
Per-step cost is never known (both report only a run's total, in ``totals``). Secrets are masked
(the host's key variables, bearer tokens, URL passwords, key-shaped strings) in every string
BEFORE anything is cut or written: a cut secret would no longer match. Stored content-addressed
(blobs.py, kind ``trajectory.json``) and linked from the item's ``agent.trajectory_sha256``.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable

from ..redact import redact
from .base import json_objects

SCHEMA = "evalfarm.trajectory/1"
TOOL_RESULT_MAX = 4000  # characters of a tool result kept; the rest is cut, and the cut said
TEXT_MAX = 20000  # characters of an agent message or a tool argument kept
KIND = "trajectory.json"
# key-shaped strings (OpenAI/Anthropic sk-, GitHub tokens, AWS access key ids), masked wherever they appear
_KEYLIKE = re.compile(r"\b(?:sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})\b")


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    for value in secrets:
        if value and len(value) >= 4 and value in text:
            text = text.replace(value, "***")
    return _KEYLIKE.sub("***", redact(text))


def _clean(value: Any, secrets: tuple[str, ...]) -> Any:
    """Every string in ``value`` masked (keys too), recursively."""
    if isinstance(value, str):
        return mask(value, secrets)
    if isinstance(value, dict):
        return {mask(str(k), secrets): _clean(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, secrets) for v in value]
    return value


def cut(text: str, limit: int) -> tuple[str, dict[str, int] | None]:
    if len(text) <= limit:
        return text, None
    return text[:limit], {"kept_chars": limit, "original_chars": len(text)}


def _text_of(content: Any) -> str:
    """A tool result's content: a string, or Anthropic content blocks (text blocks joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else json.dumps(content)


class _Steps:
    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.steps: list[dict[str, Any]] = []
        self.secrets = secrets

    def add(self, source: str, timestamp: str | None = None, **fields: Any) -> None:
        fields = _clean(fields, self.secrets)  # masked first, cut after
        for key, limit in (("content", TOOL_RESULT_MAX), ("text", TEXT_MAX)):
            if isinstance(fields.get(key), str):
                fields[key], was_cut = cut(fields[key], limit)
                if was_cut:
                    fields["cut"] = was_cut
        if "arguments" in fields:
            raw = json.dumps(fields["arguments"], ensure_ascii=False)
            if len(raw) > TEXT_MAX:
                fields["arguments"] = {"_cut": raw[:TEXT_MAX]}
                fields["cut"] = {"kept_chars": TEXT_MAX, "original_chars": len(raw)}
        self.steps.append({"index": len(self.steps), "source": source, "timestamp": timestamp, **fields})


def _claude(events: list[dict[str, Any]], steps: _Steps) -> dict[str, Any]:
    seen_messages: set[str] = set()
    totals: dict[str, Any] = {}
    for e in events:
        kind = e.get("type")
        if kind == "assistant":
            msg = e.get("message") or {}
            mid = str(msg.get("id") or "")
            if mid not in seen_messages:  # Claude Code splits a reply's blocks over events with one id
                seen_messages.add(mid)
                u = msg.get("usage") or {}
                tokens_in = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                             "cache_creation_input_tokens"))
                steps.add("model_call", e.get("timestamp"), model=msg.get("model"), message_id=mid or None,
                          input_tokens=tokens_in, cached_input_tokens=int(u.get("cache_read_input_tokens") or 0),
                          output_tokens_streamed=u.get("output_tokens"), cost_usd=None)
            for block in msg.get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text"):
                    steps.add("agent", e.get("timestamp"), text=str(block["text"]))
                elif block.get("type") == "thinking" and block.get("thinking"):
                    steps.add("agent", e.get("timestamp"), text=str(block["thinking"]), thinking=True)
                elif block.get("type") == "tool_use":
                    steps.add("tool_call", e.get("timestamp"), tool_call_id=block.get("id"), name=block.get("name"),
                              arguments=block.get("input") or {})
        elif kind == "user":
            for block in (e.get("message") or {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    steps.add("tool_result", e.get("timestamp"), tool_call_id=block.get("tool_use_id"),
                              content=_text_of(block.get("content")), is_error=bool(block.get("is_error")))
        elif kind == "result":
            u = e.get("usage") or {}
            totals = {"input_tokens": sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                                       "cache_creation_input_tokens")),
                      "output_tokens": int(u.get("output_tokens") or 0), "cost_usd": e.get("total_cost_usd"),
                      "turns": e.get("num_turns"), "duration_ms": e.get("duration_ms"),
                      "duration_api_ms": e.get("duration_api_ms"), "result": e.get("subtype")}
    return totals


def _codex(events: list[dict[str, Any]], steps: _Steps) -> dict[str, Any]:
    totals = {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0, "cost_usd": None, "turns": 0}
    for e in events:
        kind = e.get("type")
        if kind == "item.completed":
            item = e.get("item") or {}
            t, iid = item.get("type"), item.get("id")
            if t == "agent_message":
                steps.add("agent", None, text=str(item.get("text") or ""))
            elif t == "reasoning":
                steps.add("agent", None, text=str(item.get("text") or ""), thinking=True)
            elif t == "command_execution":
                steps.add("tool_call", None, tool_call_id=iid, name="exec", arguments={"command": item.get("command")})
                steps.add("tool_result", None, tool_call_id=iid, content=str(item.get("aggregated_output") or ""),
                          exit_code=item.get("exit_code"), is_error=item.get("status") != "completed")
            elif t == "file_change":
                steps.add("tool_call", None, tool_call_id=iid, name="apply_patch",
                          arguments={"changes": item.get("changes") or []})
                steps.add("tool_result", None, tool_call_id=iid, content=str(item.get("status") or ""),
                          is_error=item.get("status") != "completed")
            elif t == "mcp_tool_call":
                steps.add("tool_call", None, tool_call_id=iid, name=f"{item.get('server')}.{item.get('tool')}",
                          arguments=item.get("arguments") or {})
                steps.add("tool_result", None, tool_call_id=iid, content=_text_of(item.get("result")),
                          is_error=item.get("status") != "completed")
            elif t == "web_search":
                steps.add("tool_call", None, tool_call_id=iid, name="web_search", arguments={"query": item.get("query")})
        elif kind == "turn.completed":
            u = e.get("usage") or {}
            steps.add("model_call", None, scope="turn", input_tokens=int(u.get("input_tokens") or 0),
                      cached_input_tokens=int(u.get("cached_input_tokens") or 0),
                      output_tokens=int(u.get("output_tokens") or 0), cost_usd=None)
            totals["input_tokens"] += int(u.get("input_tokens") or 0)
            totals["output_tokens"] += int(u.get("output_tokens") or 0)
            totals["cached_input_tokens"] += int(u.get("cached_input_tokens") or 0)
            totals["turns"] += 1
        elif kind in ("turn.failed", "error"):
            detail = e.get("error") or e.get("message") or ""
            steps.add("agent", None, text=str(detail.get("message") if isinstance(detail, dict) else detail),
                      is_error=True)
    return totals


PARSERS: dict[str, Callable[[list[dict[str, Any]], _Steps], dict[str, Any]]] = {"claude": _claude, "codex": _codex}


def build(agent: str, stdout: str, secrets: Iterable[str] = (), model: str | None = None,
          version: str | None = None, task: str | None = None) -> dict[str, Any] | None:
    """The trajectory of one run from its stdout, or None for an agent whose output is not parsed yet."""
    parser = PARSERS.get(agent)
    if parser is None:
        return None
    steps = _Steps(tuple(sorted({s for s in secrets if s}, key=len, reverse=True)))
    totals = parser(json_objects(stdout), steps)
    return {"schema": SCHEMA, "agent": agent, "version": version, "model": model,
            "task": cut(mask(task, steps.secrets), TEXT_MAX)[0] if task else None, "steps": steps.steps,
            "totals": _clean(totals, steps.secrets), "tool_result_max_chars": TOOL_RESULT_MAX,
            "per_step_cost": "unknown (the agent reports only the run's total)"}


def encode(trajectory: dict[str, Any]) -> bytes:
    return json.dumps(trajectory, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def store(agent: str, stdout_path: Any, directory: Any, secrets: Iterable[str] = (), model: str | None = None,
          version: str | None = None, task: str | None = None) -> dict[str, Any]:
    """Build the run's trajectory from its stdout file and store it (blobs.py); returns the fields the
    item's ``agent`` record links it by (nothing for an agent without a parser or an unreadable stdout)."""
    from . import blobs

    try:
        text = stdout_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    trajectory = build(agent, text, secrets, model, version, task)
    if trajectory is None:
        return {}
    return {"trajectory_sha256": blobs.put(encode(trajectory), KIND, directory),
            "trajectory_steps": len(trajectory["steps"])}
