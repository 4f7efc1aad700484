"""Gemini CLI (`gemini --prompt=... --output-format json`): one JSON object with per-model stats.

settings.json in the private HOME selects API-key auth and turns usage statistics, telemetry and
auto-update off; the addendum goes in ~/.gemini/GEMINI.md (its global context file). Gemini
reports no cost: the caller prices. ``--skip-trust``: a fresh HOME has no trusted folders.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .pins import GEMINI
from .base import AgentRequest, AgentUsage, Driver, Invocation, Scratch, as_int, root_url
from .errors import AgentOutputError

SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


class GeminiDriver(Driver):
    name = "gemini"
    binary = "gemini"
    package = "@google/gemini-cli"
    pin = GEMINI
    key_env = "GEMINI_API_KEY"

    def build(self, request: AgentRequest, binary: Path, workdir: Path, scratch: Scratch) -> Invocation:
        env = self.environment(request, scratch)
        if request.base_url:
            env["GOOGLE_GEMINI_BASE_URL"] = root_url(request.base_url)
        files = {scratch.home / ".gemini" / "settings.json": json.dumps(SETTINGS, indent=2)}
        if request.addendum:
            files[scratch.home / ".gemini" / "GEMINI.md"] = request.addendum + "\n"
        argv = [str(binary), f"--prompt={request.prompt}", "--output-format", "json", "--approval-mode", "yolo",
                "--skip-trust", f"--model={request.model}", *request.extra_args]
        return Invocation(argv, env, files)

    def parse(self, stdout: str, invocation: Invocation) -> AgentUsage:
        report = last_object(stdout)
        stats = report.get("stats")
        error = report.get("error")
        if not isinstance(stats, dict) and not error:
            raise AgentOutputError("gemini: its JSON output has no stats")
        models = (stats or {}).get("models") or {}
        tokens_in = tokens_out = cached = turns = 0
        for name, model in models.items():
            tokens = model.get("tokens") if isinstance(model, dict) else None
            if not isinstance(tokens, dict):
                raise AgentOutputError(f"gemini: stats.models.{name} has no tokens")
            tokens_in += as_int(tokens.get("prompt"), "tokens.prompt", self.name)
            cached += as_int(tokens.get("cached"), "tokens.cached", self.name)
            tokens_out += (as_int(tokens.get("candidates"), "tokens.candidates", self.name)
                           + as_int(tokens.get("thoughts"), "tokens.thoughts", self.name))
            turns += as_int((model.get("api") or {}).get("totalRequests"), "api.totalRequests", self.name)
        tools = (stats or {}).get("tools") or {}
        if error:
            error = "gemini: " + str(error.get("message") if isinstance(error, dict) else error)[:300]
        return AgentUsage(tokens_in, tokens_out, None, turns, as_int(tools.get("totalCalls"), "tools.totalCalls", self.name),
                          str(report.get("response") or ""), cached_input_tokens=cached, error=error,
                          models=tuple(models))


def last_object(stdout: str) -> dict[str, Any]:
    """The JSON report; a line of noise before it (a warning on stdout) is tolerated."""
    text = stdout.strip()
    for start in [0, *(i + 1 for i, ch in enumerate(text) if ch == "\n" and text[i + 1:i + 2] == "{")]:
        try:
            value = json.loads(text[start:])
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise AgentOutputError(f"gemini: stdout is not its JSON report ({text[:120]!r})")
