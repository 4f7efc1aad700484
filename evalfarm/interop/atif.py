"""An agent item's trajectory (agents/trajectory.py) as Harbor's ATIF v1.4 (Agent Trajectory Interchange
Format, harbor docs/rfcs/0001-trajectory-format.md): one JSON object per agent item.

Mapping: the task prompt is a ``user`` step; each model reply opens an ``agent`` step (Claude Code:
a ``model_call``; Codex: everything up to its ``turn.completed`` is one step, as it reports usage per
turn) holding the reply's text (``message``), thinking (``reasoning_content``), its ``tool_calls`` and
their results (``observation.results`` by ``source_call_id``) and ``metrics`` (``prompt_tokens`` with
cached tokens included, ``cached_tokens``, ``completion_tokens`` where the agent reports them; Claude
Code's streamed count goes to ``metrics.extra``). A cut tool result says so in the step's ``extra``.
``final_metrics`` are the agent's own totals. A model call only the relay saw (model_relay.py) is an
``agent`` step of its own (``extra.seen_by``), except in a Codex turn, whose per-request calls go to the
turn step's ``extra.relay_calls`` (the turn's metrics already count them). Pure: dicts in, dicts out; the CLI reads and writes.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

ATIF_VERSION = "ATIF-v1.4"


def _metrics(call: dict[str, Any]) -> dict[str, Any]:
    m: dict[str, Any] = {"prompt_tokens": call.get("input_tokens"), "cached_tokens": call.get("cached_input_tokens")}
    if call.get("output_tokens") is not None:
        m["completion_tokens"] = call["output_tokens"]
    if call.get("cost_usd") is not None:
        m["cost_usd"] = call["cost_usd"]
    if call.get("output_tokens_streamed") is not None:
        m["extra"] = {"output_tokens_streamed": call["output_tokens_streamed"]}
    return {k: v for k, v in m.items() if v is not None}


class _Step:
    def __init__(self) -> None:
        self.message: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.metrics: dict[str, Any] | None = None
        self.model: str | None = None
        self.timestamp: str | None = None
        self.cuts: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.extra: dict[str, Any] = {}

    def empty(self) -> bool:
        return not (self.message or self.reasoning or self.calls or self.results or self.metrics)

    def take(self, s: dict[str, Any]) -> None:
        self.timestamp = self.timestamp or s.get("timestamp")
        src = s["source"]
        if src == "agent":
            (self.reasoning if s.get("thinking") else self.message).append(str(s.get("text") or ""))
        elif src == "tool_call":
            self.calls.append({"tool_call_id": str(s.get("tool_call_id") or f"call-{s['index']}"),
                               "function_name": str(s.get("name") or "?"),
                               "arguments": s.get("arguments") if isinstance(s.get("arguments"), dict) else {}})
        elif src == "tool_result":
            self.results.append({"source_call_id": s.get("tool_call_id"), "content": str(s.get("content") or "")})
            if s.get("is_error"):
                self.errors.append(str(s.get("tool_call_id")))
        if s.get("cut"):
            self.cuts.append({"step": s["index"], **s["cut"]})

    def atif(self, step_id: int, default_model: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"step_id": step_id, "source": "agent", "message": "\n".join(self.message)}
        if self.timestamp:
            out["timestamp"] = self.timestamp
        if self.model or default_model:
            out["model_name"] = self.model or default_model
        if self.reasoning:
            out["reasoning_content"] = "\n".join(self.reasoning)
        if self.calls:
            out["tool_calls"] = self.calls
        if self.results:
            out["observation"] = {"results": self.results}
        if self.metrics:
            out["metrics"] = self.metrics
        extra = dict(self.extra)
        if self.cuts:
            extra["cut"] = self.cuts
        if self.errors:
            extra["tool_errors"] = self.errors
        if extra:
            out["extra"] = extra
        return out


def to_atif(trajectory: dict[str, Any], outcome: dict[str, Any], run_id: str) -> dict[str, Any]:
    """One agent item's ATIF trajectory."""
    agent = outcome.get("agent") or {}
    model = trajectory.get("model") or agent.get("model")
    steps: list[dict[str, Any]] = []
    if trajectory.get("task"):
        steps.append({"step_id": 1, "source": "user", "message": str(trajectory["task"])})
    per_turn = trajectory.get("agent") == "codex"  # usage per turn, reported at its end
    current = _Step()
    relay_calls: list[dict[str, Any]] = []
    for s in trajectory.get("steps") or []:
        if s.get("source") == "model_call":
            if per_turn and s.get("scope") != "turn" and s.get("seen_by") == ["relay"]:
                relay_calls.append({**_metrics(s), "latency_ms": s.get("latency_ms"), "status": s.get("status")})
                continue
            if per_turn:
                current.metrics = _metrics(s)
                if relay_calls:
                    current.extra["relay_calls"], relay_calls = relay_calls, []
                steps.append(current.atif(len(steps) + 1, model))
                current = _Step()
                continue
            if not current.empty():
                steps.append(current.atif(len(steps) + 1, model))
            current = _Step()
            current.metrics, current.model = _metrics(s), s.get("model")
            current.timestamp = s.get("timestamp")
            if s.get("seen_by"):
                current.extra["seen_by"] = s["seen_by"]
            continue
        current.take(s)
    if not current.empty():
        steps.append(current.atif(len(steps) + 1, model))
    totals = trajectory.get("totals") or {}
    final = {"total_prompt_tokens": totals.get("input_tokens"), "total_completion_tokens": totals.get("output_tokens"),
             "total_cached_tokens": totals.get("cached_input_tokens"), "total_cost_usd": totals.get("cost_usd"),
             "total_steps": len(steps)}
    session = hashlib.sha256(f"{run_id}:{outcome.get('key')}".encode()).hexdigest()[:32]
    return {
        "schema_version": ATIF_VERSION, "session_id": session,
        "agent": {"name": str(trajectory.get("agent") or agent.get("agent") or "agent"),
                  "version": str(trajectory.get("version") or agent.get("version") or "unknown"),
                  **({"model_name": model} if model else {})},
        "steps": steps,
        "notes": ("exported by evalfarm from the agent's own output and the model relay's record (sources: "
                  f"{', '.join(trajectory.get('sources') or ['agent'])}); "
                  + ("the two accounts DISAGREE: " + str((trajectory.get("agreement") or {}).get("why")) + "; "
                     if (trajectory.get("agreement") or {}).get("mismatched") else "")
                  + "per-step cost only where the agent reports it; tool results longer than "
                  f"{trajectory.get('tool_result_max_chars')} characters were cut when stored (step extra.cut)"),
        "final_metrics": {k: v for k, v in final.items() if v is not None},
        "extra": {"run_id": run_id, "item": outcome.get("key"), "adapter": outcome.get("adapter"),
                  "prompt_id": outcome.get("prompt_id"), "trial": outcome.get("trial"),
                  "failure_class": outcome.get("failure_class"), "passed": outcome.get("passed")},
    }


def file_name(outcome: dict[str, Any]) -> str:
    """A safe file name for one item: adapter, prompt id, trial, key prefix."""
    def safe(x: Any) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(x))[:60]
    return (f"{safe(outcome.get('adapter'))}__{safe(outcome.get('prompt_id'))}__t{outcome.get('trial', 0)}__"
            f"{safe(str(outcome.get('key') or '')[:12])}.json")


def encode(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, ensure_ascii=False, indent=1) + "\n").encode("utf-8")
