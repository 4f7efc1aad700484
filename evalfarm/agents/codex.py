"""Codex CLI (`codex exec --json`): JSONL events; each ``turn.completed`` carries the turn's usage.

Everything codex reads goes under a private CODEX_HOME: config.toml names our endpoint as a model
provider (Responses API, key from OPENAI_API_KEY, no retries, no analytics, feedback, OpenTelemetry,
history or plugin sync) and AGENTS.md carries the addendum (codex reads it as user instructions).
Codex reports no cost (the caller prices) and no round-trip count: ``turns`` counts its completed
steps (commands, file changes, tool calls, messages), which equals the round trips when the model
makes one call per reply. It creates /tmp/codex-daemon-<uid>/ whatever TMPDIR says.
"""
from __future__ import annotations

import json
from pathlib import Path

from .pins import CODEX
from .base import AgentRequest, AgentUsage, Driver, Invocation, Scratch, as_int, json_lines, openai_url
from .errors import AgentOutputError

STEP_ITEMS = ("agent_message", "command_execution", "file_change", "mcp_tool_call", "web_search")
TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search")


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class CodexDriver(Driver):
    name = "codex"
    binary = "codex"
    package = "@openai/codex"
    pin = CODEX
    key_env = "OPENAI_API_KEY"

    def build(self, request: AgentRequest, binary: Path, workdir: Path, scratch: Scratch) -> Invocation:
        env = self.environment(request, scratch)
        codex_home = scratch.home / ".codex"
        env["CODEX_HOME"] = str(codex_home)
        # in evalfarm's jail codex's own sandbox (it needs namespaces and capabilities the jail took away)
        # cannot start, and the jail confines it already
        mode = "danger-full-access" if request.jailed else "workspace-write"
        lines = [f"model = {_toml(request.model)}", 'approval_policy = "never"', f'sandbox_mode = "{mode}"',
                 "check_for_update_on_startup = false"]
        if request.base_url:
            lines += ['model_provider = "evalfarm"', "", "[model_providers.evalfarm]", 'name = "evalfarm"',
                      f"base_url = {_toml(openai_url(request.base_url))}", 'env_key = "OPENAI_API_KEY"',
                      'wire_api = "responses"', "request_max_retries = 0", "stream_max_retries = 0"]
        lines += ["", "[analytics]", "enabled = false", "", "[feedback]", "enabled = false", "", "[otel]",
                  'exporter = "none"', "", "[history]", 'persistence = "none"', "", "[features]",
                  "plugins = false  # plugin sync resolves api.github.com at start-up", ""]
        files = {codex_home / "config.toml": "\n".join(lines)}
        if request.addendum:
            files[codex_home / "AGENTS.md"] = request.addendum + "\n"
        argv = [str(binary), "exec", "--json", "--skip-git-repo-check", *request.extra_args, "--", request.prompt]
        return Invocation(argv, env, files)

    def parse(self, stdout: str, invocation: Invocation) -> AgentUsage:
        events = json_lines(stdout, self.name)
        turns = [e for e in events if e.get("type") == "turn.completed"]
        failed = [e for e in events if e.get("type") in ("turn.failed", "error")]
        if not turns and not failed:
            raise AgentOutputError("codex: no turn.completed event in its --json output (cut short?)")
        tokens_in = tokens_out = cached = 0
        for turn in turns:
            usage = turn.get("usage")
            if not isinstance(usage, dict):
                raise AgentOutputError("codex: a turn.completed event has no usage")
            tokens_in += as_int(usage.get("input_tokens"), "input_tokens", self.name)
            cached += as_int(usage.get("cached_input_tokens"), "cached_input_tokens", self.name)
            tokens_out += as_int(usage.get("output_tokens"), "output_tokens", self.name)
        items = [e.get("item") or {} for e in events if e.get("type") == "item.completed"]
        messages = [str(i.get("text") or "") for i in items if i.get("type") == "agent_message"]
        error = None
        if failed:
            detail = failed[-1].get("error") or failed[-1].get("message") or failed[-1]
            error = "codex: " + str(detail.get("message") if isinstance(detail, dict) else detail)[:300]
        return AgentUsage(tokens_in, tokens_out, None, sum(1 for i in items if i.get("type") in STEP_ITEMS),
                          sum(1 for i in items if i.get("type") in TOOL_ITEMS), messages[-1] if messages else "",
                          cached_input_tokens=cached, error=error)
