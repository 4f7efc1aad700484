"""What an agent did, step by step: one trajectory per agent task, from two sources kept apart.

The agent's own output, parsed per agent: Claude Code's stream-json, Codex's ``exec --json`` events,
opencode's ``--format json`` events, aider's chat history and analytics log, Gemini CLI's final
report (an answer and totals, no steps). And the model relay's record of every call it forwarded
(model_relay.py): ``merge_relay`` joins the two and says where they disagree. Each step has a ``source``:

- ``model_call``: one model reply; Claude Code: ``input_tokens`` per reply (cache reads and writes
  added back), its stream's ``output_tokens`` kept as ``output_tokens_streamed`` (stream-json
  carries the reply's first usage, 1 token, not its final count); Codex: one step per turn with
  the turn's usage (``scope: turn``; codex reports no per-request figures: the relay's are the
  per-request steps); opencode and aider: tokens and cost per call; ``seen_by`` says which source
  saw it, ``relay`` the relay's figures for it (latency, status, tokens on the wire);
- ``agent``: a message of the model's (text);
- ``tool_call``: ``name`` and ``arguments`` (Claude Code's tool input; Codex's ``exec`` with the
  command, ``apply_patch`` with the changed files, an MCP tool with its arguments; opencode's tool
  input; aider's ``apply_edit``; a tool call the relay read from a reply);
- ``tool_result``: ``content`` cut at ``TOOL_RESULT_MAX`` characters (``cut`` then says how many
  there were), ``is_error``, ``exit_code`` where known.

``timestamp`` is the source's own (Claude Code stamps tool results, opencode everything, the relay
each call; Codex stamps nothing: None). Secrets are masked (the host's key variables, bearer tokens,
URL passwords, key-shaped strings) in every string BEFORE anything is cut or written: a cut secret
would no longer match. Stored content-addressed (blobs.py, kind ``trajectory.json``) and linked
from the item's ``agent.trajectory_sha256``.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from ..redact import redact
from .base import json_objects
from .errors import AgentOutputError
from .gemini import last_object

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


def _ms_iso(ms: Any) -> str | None:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _opencode(events: list[dict[str, Any]], steps: _Steps) -> dict[str, Any]:
    """opencode's ``--format json``: per model round trip a ``step_start``, its parts (``text``,
    ``reasoning``, ``tool_use`` with the call's input and output), then ``step_finish`` with that
    round trip's tokens and cost: the model_call step is placed at the round trip's start."""
    totals: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0, "cost_usd": 0.0,
                              "model_calls": 0}
    open_call: int | None = None
    for e in events:
        kind, part, ts = e.get("type"), e.get("part") or {}, _ms_iso(e.get("timestamp"))
        if kind == "step_start":
            steps.add("model_call", ts, model=None, input_tokens=None, output_tokens=None, cost_usd=None)
            open_call = len(steps.steps) - 1
        elif kind == "step_finish":
            tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
            cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
            read = _int(cache.get("read"))
            tin = _int(tokens.get("input")) + read + _int(cache.get("write"))
            tout = _int(tokens.get("output")) + _int(tokens.get("reasoning"))
            cost = part.get("cost") if isinstance(part.get("cost"), (int, float)) else None
            fields = {"input_tokens": tin, "output_tokens": tout, "cached_input_tokens": read,
                      "cost_usd": cost if cost else None, "finish": part.get("reason")}
            if open_call is None:
                steps.add("model_call", ts, model=None, **fields)
            else:
                steps.steps[open_call].update(_clean(fields, steps.secrets))
            open_call = None
            totals["input_tokens"] += tin
            totals["output_tokens"] += tout
            totals["cached_input_tokens"] += read
            totals["cost_usd"] += cost or 0.0
            totals["model_calls"] += 1
        elif kind == "text" and part.get("text"):
            steps.add("agent", ts, text=str(part["text"]))
        elif kind == "reasoning" and part.get("text"):
            steps.add("agent", ts, text=str(part["text"]), thinking=True)
        elif kind == "tool_use":
            state = part.get("state") or {}
            cid = part.get("callID")
            steps.add("tool_call", _ms_iso((state.get("time") or {}).get("start")) or ts, tool_call_id=cid,
                      name=part.get("tool"), arguments=state.get("input") or {})
            status = state.get("status")
            if status in ("completed", "error"):
                steps.add("tool_result", _ms_iso((state.get("time") or {}).get("end")) or ts, tool_call_id=cid,
                          content=_text_of(state.get("output") if status == "completed" else state.get("error")),
                          is_error=status == "error")
        elif kind == "error":
            detail = e.get("error") or {}
            steps.add("agent", ts, text=json.dumps(detail, ensure_ascii=False)[:TEXT_MAX], is_error=True)
    if not totals["model_calls"]:
        totals.pop("model_calls")
    totals["cost_usd"] = totals["cost_usd"] or None
    return totals


def _gemini(report: dict[str, Any], steps: _Steps) -> dict[str, Any]:
    """Gemini CLI's ``--output-format json`` is one report: the final answer and per-model totals, no
    steps (the relay's record gives the model calls and the tool calls the model asked for)."""
    stats = report.get("stats") if isinstance(report.get("stats"), dict) else {}
    totals: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0, "cost_usd": None,
                              "model_calls": 0}
    for m in (stats.get("models") or {}).values():
        t = (m or {}).get("tokens") or {}
        totals["input_tokens"] += _int(t.get("prompt"))
        totals["output_tokens"] += _int(t.get("candidates")) + _int(t.get("thoughts"))
        totals["cached_input_tokens"] += _int(t.get("cached"))
        totals["model_calls"] += _int(((m or {}).get("api") or {}).get("totalRequests"))
    tools = stats.get("tools") if isinstance(stats.get("tools"), dict) else {}
    if tools.get("byName"):
        totals["tool_calls_by_name"] = {str(k): _int((v or {}).get("count")) for k, v in tools["byName"].items()}
    if report.get("response"):
        steps.add("agent", None, text=str(report["response"]))
    if report.get("error"):
        err = report["error"]
        steps.add("agent", None, text=str(err.get("message") if isinstance(err, dict) else err), is_error=True)
    return totals


def _aider(events: list[dict[str, Any]], chat: str, steps: _Steps) -> dict[str, Any]:
    """aider has no tools: its chat history (markdown) holds the user's messages (``#### ``), the model's
    replies (the SEARCH/REPLACE blocks inside them) and aider's own lines (``> ``, e.g. "Applied edit to
    F"); its analytics log has one ``message_send`` per model call with tokens and cost. Each reply gets
    the next call's figures; each "Applied edit" is a tool call (``apply_edit``) with its result."""
    sends = [(e.get("properties") or {}, e.get("time")) for e in events if e.get("event") == "message_send"]
    totals: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "model_calls": len(sends)}
    for p, _ in sends:
        totals["input_tokens"] += _int(p.get("prompt_tokens"))
        totals["output_tokens"] += _int(p.get("completion_tokens"))
        totals["cost_usd"] += p.get("cost") if isinstance(p.get("cost"), (int, float)) else 0.0
    totals["cost_usd"] = totals["cost_usd"] or None
    lines = chat.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("# aider chat started")]
    lines = lines[starts[-1] + 1:] if starts else lines
    first_user = next((i for i, line in enumerate(lines) if line.startswith("#### ")), None)
    if first_user is None:
        return totals
    reply: list[str] = []
    said: list[str] = []
    n = 0

    def flush_reply() -> None:
        nonlocal n
        text = "\n".join(reply).strip()
        reply.clear()
        if not text:
            return
        p, t = sends[n] if n < len(sends) else ({}, None)
        steps.add("model_call", _ms_iso(t * 1000) if isinstance(t, (int, float)) else None,
                  model=p.get("main_model"), input_tokens=_int(p.get("prompt_tokens")) if p else None,
                  output_tokens=_int(p.get("completion_tokens")) if p else None,
                  cost_usd=p.get("cost") if isinstance(p.get("cost"), (int, float)) and p.get("cost") else None)
        n += 1
        steps.add("agent", None, text=text)

    def flush_said() -> None:
        text = "\n".join(said).strip()
        said.clear()
        if text:
            steps.add("tool_result", None, tool_call_id=None, name="aider", content=text,
                      is_error="error" in text.lower())

    for line in lines[first_user:]:
        if line.startswith("#### "):
            flush_reply()
            flush_said()
        elif line.startswith("> ") or line == ">":  # aider's own lines (a reply's ">>>>>>> REPLACE" is not one)
            flush_reply()
            body = line[1:].strip()
            if body.startswith("Applied edit to "):
                flush_said()
                target = body[len("Applied edit to "):]
                cid = f"edit-{len(steps.steps)}"
                steps.add("tool_call", None, tool_call_id=cid, name="apply_edit", arguments={"file": target})
                steps.add("tool_result", None, tool_call_id=cid, content=body, is_error=False)
            elif body and not body.startswith("Tokens: "):
                said.append(body)
        else:
            if said:
                flush_said()
            reply.append(line)
    flush_reply()
    flush_said()
    return totals


def _int(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0


def _gemini_report(stdout: str) -> dict[str, Any]:
    """The driver's reader of Gemini CLI's JSON report; no report is no steps here, not an error."""
    try:
        return last_object(stdout)
    except AgentOutputError:
        return {}


PARSERS: dict[str, Callable[[list[dict[str, Any]], _Steps], dict[str, Any]]] = {
    "claude": _claude, "codex": _codex, "opencode": _opencode}
AGENTS = ("claude", "codex", "opencode", "gemini", "aider")  # agents whose own output gives steps or totals


def _agent_steps(agent: str, stdout: str, files: dict[str, str], steps: _Steps) -> dict[str, Any] | None:
    if agent in PARSERS:
        return PARSERS[agent](json_objects(stdout), steps)
    if agent == "gemini":
        return _gemini(_gemini_report(stdout), steps)
    if agent == "aider":
        return _aider(json_objects(files.get("events", "")), files.get("chat", ""), steps)
    return None


def build(agent: str, stdout: str, secrets: Iterable[str] = (), model: str | None = None,
          version: str | None = None, task: str | None = None, files: dict[str, str] | None = None,
          relay_calls: list[dict[str, Any]] | None = None, usage: dict[str, Any] | None = None
          ) -> dict[str, Any] | None:
    """The trajectory of one run from its own output (stdout, and the files ``files`` names: aider's
    analytics log and chat history) and the relay's record of its model calls (``relay_calls``,
    model_relay.py); None when neither says anything (an agent we do not parse, run without a relay)."""
    steps = _Steps(tuple(sorted({s for s in secrets if s}, key=len, reverse=True)))
    totals = _agent_steps(agent, stdout, files or {}, steps)
    if totals is None and usage and (usage.get("input_tokens") or usage.get("output_tokens") or usage.get("turns")):
        # an agent without steps of its own (a command: agent) that still gave an account (its usage file)
        totals = {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
                  "cost_usd": usage.get("cost_usd"), **({"model_calls": usage["turns"]} if usage.get("turns") else {})}
    calls = [c for c in relay_calls or [] if relay_model_call(c)]
    if totals is None and not calls:
        return None
    own = bool(steps.steps)
    trajectory = {"schema": SCHEMA, "agent": agent, "version": version, "model": model,
                  "task": cut(mask(task, steps.secrets), TEXT_MAX)[0] if task else None,
                  "totals": _clean(totals or {}, steps.secrets), "tool_result_max_chars": TOOL_RESULT_MAX,
                  "per_step_cost": "per model call where the agent reports it (opencode, aider); else unknown "
                                   "(the agent reports only the run's total)"}
    sources = (["agent"] if own else []) + (["relay"] if relay_calls is not None else [])
    trajectory["sources"] = sources
    if relay_calls is not None:
        trajectory["agreement"] = merge_relay(steps, calls, totals, agent)
    trajectory["steps"] = steps.steps
    for i, s in enumerate(steps.steps):
        s["index"] = i
    return trajectory


# -- the relay's record as a second source ---------------------------------------------------------------
_MODEL_PATHS = ("/messages", "/chat/completions", "/responses", "/completions", ":generateContent",
                ":streamGenerateContent")


def relay_model_call(call: dict[str, Any]) -> bool:
    """A request that asked a model for a reply (not count_tokens, a model list, a refused token)."""
    path = str(call.get("path") or "")
    return call.get("forwarded") is True and call.get("method") == "POST" and path.endswith(_MODEL_PATHS)


def _relay_step(steps: _Steps, call: dict[str, Any], index: int, seen_by: list[str]) -> list[dict[str, Any]]:
    """A relay call as steps (not yet placed): its model_call, then the text and tool calls its reply holds."""
    from .wire_reply import read_reply

    ts = datetime.fromtimestamp(call["time"], timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z") if isinstance(call.get("time"), (int, float)) else None
    out = _Steps(steps.secrets)
    out.add("model_call", ts, model=call.get("model"), input_tokens=call.get("input_tokens"),
            output_tokens=call.get("output_tokens"), cost_usd=None, latency_ms=call.get("latency_ms"),
            status=call.get("status"), relay_call=index, seen_by=seen_by)
    if 200 <= int(call.get("status") or 0) < 300:
        reply = read_reply(str(call.get("content_type") or ""), call.get("reply") or b"")
        if reply["text"].strip():
            out.add("agent", ts, text=reply["text"], seen_by=["relay"])
        for tc in reply["tool_calls"]:
            out.add("tool_call", ts, tool_call_id=tc["id"], name=tc["name"], arguments=tc["arguments"],
                    seen_by=["relay"])
    elif call.get("error"):
        out.add("agent", ts, text=f"the relay could not reach the model endpoint ({call['error']})", is_error=True,
                seen_by=["relay"])
    return out.steps


def merge_relay(steps: _Steps, calls: list[dict[str, Any]], totals: dict[str, Any] | None,
                agent: str) -> dict[str, Any]:
    """Join the relay's model calls to the agent's steps and say whether the two accounts agree.

    Where the agent reports each model call (Claude Code, opencode, aider), the i-th call it reports is
    the i-th the relay forwarded: the step gets the relay's latency, status and token counts
    (``relay``) and ``seen_by: [agent, relay]``; a call only one side has is kept and marked with that
    side alone. Where it does not (Codex reports per turn, Gemini per run, a ``command:`` agent or a
    CLI that printed nothing readable), the relay's calls become the model_call steps (opening a Codex
    turn), with the text and tool calls read from each reply when the agent gave no steps.
    The accounts are ``mismatched`` when a call the agent reported was never forwarded or its tokens
    differ from the relay's count, or, for an agent reporting totals only, when its number of calls or
    its token totals differ. A call the relay forwarded that a per-call agent did not report (opencode's
    title request) is a step of its own, ``seen_by: [relay]``, counted in ``unreported_calls``: shown,
    not a mismatch (the agent's account of what it reported is still right)."""
    own_calls = [s for s in steps.steps if s["source"] == "model_call" and s.get("scope") != "turn"]
    per_call = agent in ("claude", "opencode", "aider") and bool(own_calls)
    had_steps = bool(steps.steps)
    r_in = sum(_int(c.get("input_tokens")) for c in calls)
    r_out = sum(_int(c.get("output_tokens")) for c in calls)
    paired: dict[int, int] = {}  # own call's position in own_calls -> relay call
    if per_call:
        # a reported call is the forwarded one with the same tokens (side calls such as opencode's title
        # request run beside the agent's); else the next unpaired one for the same model, in order
        free = list(range(len(calls)))
        for n, s in enumerate(own_calls):
            same = [k for k in free if (_int(calls[k].get("input_tokens")), _int(calls[k].get("output_tokens"))) ==
                    (_int(s.get("input_tokens")), _int(s.get("output_tokens") if s.get("output_tokens") is not None
                                                       else calls[k].get("output_tokens")))]
            after = [k for k in free if k > max(paired.values(), default=-1) and not (
                s.get("model") and calls[k].get("model") and calls[k]["model"] != s["model"])]
            k = (same or after or [None])[0]
            if k is None:
                s["seen_by"] = ["agent"]
                continue
            free.remove(k)
            paired[n] = k
            c = calls[k]
            s.update(seen_by=["agent", "relay"], relay_call=k, relay={
                "input_tokens": c.get("input_tokens"), "output_tokens": c.get("output_tokens"),
                "latency_ms": c.get("latency_ms"), "status": c.get("status")})
            if s.get("model") is None and c.get("model"):
                s["model"] = mask(str(c["model"]), steps.secrets)
            if s.get("latency_ms") is None:
                s["latency_ms"] = c.get("latency_ms")
        # a call only the relay saw goes before the first reported call the relay forwarded after it
        at = {id(own_calls[n]): k for n, k in paired.items()}
        merged: list[dict[str, Any]] = []
        for s in steps.steps:
            if id(s) in at:
                for k in [k for k in free if k < at[id(s)]]:
                    merged.extend(_relay_step(steps, calls[k], k, ["relay"])[:1])
                    free.remove(k)
            merged.append(s)
        for k in free:
            merged.extend(_relay_step(steps, calls[k], k, ["relay"])[:1])
        steps.steps[:] = merged
    else:
        new: list[dict[str, Any]] = []
        own_tools = any(s["source"] == "tool_call" for s in steps.steps)
        for i, c in enumerate(calls):
            made = _relay_step(steps, c, i, ["relay"])
            if own_tools:  # the agent's own steps already hold what it did
                made = made[:1]
            elif had_steps:  # its own steps are a report (Gemini CLI): the replies' tool calls, not their text
                made = [m for m in made if m["source"] != "agent"]
            new.extend(made)
        turn = any(s.get("scope") == "turn" for s in steps.steps)
        # a Codex turn's calls open it (its items carry no times to place them among); a report's answer
        # (Gemini CLI) comes after the calls that led to it
        at = 0 if turn else (len(steps.steps) - 1 if had_steps and steps.steps[-1]["source"] == "agent"
                             else len(steps.steps))
        steps.steps[at:at] = new
    a_in, a_out = (totals or {}).get("input_tokens"), (totals or {}).get("output_tokens")
    why = []
    if per_call:
        a_calls = len(own_calls)
        unseen = a_calls - len(paired)
        if unseen:
            why.append(f"the relay never forwarded {unseen} of the {a_calls} model calls the agent reported")
        differ = [n for n, k in paired.items() if _int(own_calls[n].get("input_tokens")) != _int(
            calls[k].get("input_tokens")) or (own_calls[n].get("output_tokens") is not None and _int(
                own_calls[n]["output_tokens"]) != _int(calls[k].get("output_tokens")))]
        if differ:
            why.append(f"{len(differ)} model calls' tokens differ between the agent's account and the relay's")
        unreported = len(calls) - len(paired)
    else:
        a_calls = (totals or {}).get("model_calls")
        if a_calls is not None and a_calls != len(calls):
            why.append(f"the agent reported {a_calls} model calls, the relay forwarded {len(calls)}")
        if totals and (a_in, a_out) != (r_in, r_out) and (a_in or a_out or r_in or r_out):
            why.append(f"the agent reported {a_in}/{a_out} tokens in/out, the relay counted {r_in}/{r_out}")
        unreported = max(0, len(calls) - a_calls) if a_calls is not None else None
    if totals is None or not had_steps:
        why_none = "the agent's own output gave no steps: the steps are the relay's record"
    else:
        why_none = None
    return {"agent_model_calls": a_calls, "relay_model_calls": len(calls), "agent_tokens": [a_in, a_out],
            "relay_tokens": [r_in, r_out], "mismatched": bool(why), "why": "; ".join(why) or None,
            "relay_only": why_none, "unreported_calls": unreported}


def encode(trajectory: dict[str, Any]) -> bytes:
    return json.dumps(trajectory, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _read(path: Any) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[:64 * 2**20]
    except (OSError, AttributeError):
        return ""


def store(agent: str, stdout_path: Any, directory: Any, secrets: Iterable[str] = (), model: str | None = None,
          version: str | None = None, task: str | None = None, files: dict[str, Any] | None = None,
          relay_calls: list[dict[str, Any]] | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the run's trajectory (``build``; ``files``: name -> path of the other files its driver
    reads) and store it (blobs.py); returns the fields the item's ``agent`` record links it by, with
    ``trajectory_mismatch`` (why) when the agent's account and the relay's disagree; nothing when
    there is no trajectory."""
    from . import blobs

    trajectory = build(agent, _read(stdout_path), secrets, model, version, task,
                       {k: _read(p) for k, p in (files or {}).items()}, relay_calls, usage)
    if trajectory is None:
        return {}
    out = {"trajectory_sha256": blobs.put(encode(trajectory), KIND, directory),
           "trajectory_steps": len(trajectory["steps"]), "trajectory_sources": trajectory["sources"]}
    agreement = trajectory.get("agreement") or {}
    if agreement.get("mismatched"):
        out["trajectory_mismatch"] = agreement["why"]
    return out
