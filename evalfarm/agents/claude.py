"""Claude Code (`claude -p`): stream-json on stdout; its final ``result`` event carries the totals.

The addendum goes in with ``--append-system-prompt``; edits are allowed (``acceptEdits``), shell
commands only through ``--allowedTools`` in ``extra_args`` (as root, ``--dangerously-skip-permissions``
is refused unless IS_SANDBOX=1). ``--`` ends the options so a prompt starting with "-" stays a prompt.
Its ``total_cost_usd`` comes from its own price table: kept for claude-* models only (an unknown
model is priced at a default, $5/$25 per million in 2.1.197). It swaps retired model ids for newer
ones without a word (claude-opus-4-1 went out as claude-opus-4-8): ``models`` says what was used.
"""
from __future__ import annotations

from pathlib import Path

from .pins import CLAUDE
from .base import AgentRequest, AgentUsage, Driver, Invocation, Scratch, as_cost, as_int, json_lines, root_url
from .errors import AgentOutputError


class ClaudeDriver(Driver):
    name = "claude"
    binary = "claude"
    package = "@anthropic-ai/claude-code"
    pin = CLAUDE
    key_env = "ANTHROPIC_API_KEY"
    quiet_env = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
                 "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1"}

    def build(self, request: AgentRequest, binary: Path, workdir: Path, scratch: Scratch) -> Invocation:
        env = self.environment(request, scratch)
        if request.base_url:
            env["ANTHROPIC_BASE_URL"] = root_url(request.base_url)
        argv = [str(binary), "-p", "--output-format", "stream-json", "--verbose",
                "--permission-mode", "acceptEdits", f"--model={request.model}"]
        if request.addendum:
            argv.append(f"--append-system-prompt={request.addendum}")
        return Invocation([*argv, *request.extra_args, "--", request.prompt], env)

    def parse(self, stdout: str, invocation: Invocation) -> AgentUsage:
        events = json_lines(stdout, self.name)
        result = next((e for e in reversed(events) if e.get("type") == "result"), None)
        if result is None:
            raise AgentOutputError("claude: no `result` event in its stream-json output (cut short?)")
        usage = result.get("usage")
        if not isinstance(usage, dict):
            raise AgentOutputError("claude: the result event has no usage")
        cache_read = as_int(usage.get("cache_read_input_tokens"), "cache_read_input_tokens", self.name)
        tokens_in = (as_int(usage.get("input_tokens"), "input_tokens", self.name) + cache_read
                     + as_int(usage.get("cache_creation_input_tokens"), "cache_creation_input_tokens", self.name))
        tokens_out = as_int(usage.get("output_tokens"), "output_tokens", self.name)
        tool_calls = sum(1 for e in events if e.get("type") == "assistant"
                         for block in (e.get("message") or {}).get("content") or []
                         if isinstance(block, dict) and block.get("type") == "tool_use")
        error = None
        if result.get("is_error") or result.get("subtype") != "success":
            error = f"claude: {result.get('subtype')}: {str(result.get('result') or '')[:300]}"
        models = tuple(result.get("modelUsage") or ())
        cost = as_cost(result.get("total_cost_usd"), tokens_in + tokens_out, self.name)
        if not all(m.startswith("claude-") for m in models):
            cost = None  # its price table knows Anthropic's models; others get a default price: not a cost
        return AgentUsage(tokens_in, tokens_out, cost, as_int(result.get("num_turns"), "num_turns", self.name),
                          tool_calls, str(result.get("result") or ""), cached_input_tokens=cache_read, error=error,
                          models=models)
