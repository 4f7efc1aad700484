"""opencode (`opencode run --format json`): JSONL events; each ``step_finish`` carries that model
round trip's tokens and cost.

opencode.json in the private XDG config dir declares our endpoint as an OpenAI-compatible provider
``evalfarm`` with the model (and its price, when the request gives one: else opencode reports 0 and
the caller prices); the addendum goes in the global AGENTS.md beside it. The OPENCODE_DISABLE_*
variables stop auto-update, the models.dev fetch, LSP downloads, default plugins and sharing; the npm
registry points at a closed local port so its plugin look-up fails at once instead of going out.
It unpacks a 5.5 MB native library into TMPDIR on every run.
"""
from __future__ import annotations

import json
from pathlib import Path

from .pins import OPENCODE
from .base import AgentRequest, AgentUsage, Driver, Invocation, Scratch, as_cost, as_int, json_lines, openai_url
from .errors import AgentOutputError

CLOSED_PORT_REGISTRY = "http://127.0.0.1:9/"  # discard port: connection refused, nothing leaves the host


class OpencodeDriver(Driver):
    name = "opencode"
    binary = "opencode"
    package = "opencode-ai"
    pin = OPENCODE
    key_env = "OPENAI_API_KEY"
    quiet_env = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                 "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
                 "OPENCODE_DISABLE_SHARE": "1", "npm_config_registry": CLOSED_PORT_REGISTRY}

    def build(self, request: AgentRequest, binary: Path, workdir: Path, scratch: Scratch) -> Invocation:
        env = self.environment(request, scratch)
        model: dict = {"name": request.model, "tool_call": True, "limit": {"context": 128000, "output": 8192}}
        if request.price:
            model["cost"] = {"input": request.price.input, "output": request.price.output}
        options = {"apiKey": "{env:OPENAI_API_KEY}"}
        if request.base_url:
            options["baseURL"] = openai_url(request.base_url)
        config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False, "share": "disabled",
                  "provider": {"evalfarm": {"npm": "@ai-sdk/openai-compatible", "name": "evalfarm",
                                            "options": options, "models": {request.model: model}}},
                  "model": f"evalfarm/{request.model}", "small_model": f"evalfarm/{request.model}"}
        config_dir = scratch.home / ".config" / "opencode"
        files = {config_dir / "opencode.json": json.dumps(config, indent=2)}
        if request.addendum:
            files[config_dir / "AGENTS.md"] = request.addendum + "\n"
        argv = [str(binary), "run", f"--model=evalfarm/{request.model}", "--format", "json", *request.extra_args,
                "--", request.prompt]
        return Invocation(argv, env, files)

    def parse(self, stdout: str, invocation: Invocation) -> AgentUsage:
        events = json_lines(stdout, self.name)
        steps = [e.get("part") or {} for e in events if e.get("type") == "step_finish"]
        errors = [e for e in events if e.get("type") == "error"]
        if not steps and not errors:
            raise AgentOutputError("opencode: no step_finish event in its --format json output")
        tokens_in = tokens_out = cached = 0
        cost = 0.0
        for part in steps:
            tokens = part.get("tokens")
            if not isinstance(tokens, dict):
                raise AgentOutputError("opencode: a step_finish event has no tokens")
            cache = tokens.get("cache") or {}
            read = as_int(cache.get("read"), "cache.read", self.name)
            cached += read
            tokens_in += as_int(tokens.get("input"), "input", self.name) + read + as_int(cache.get("write"), "cache.write", self.name)
            tokens_out += as_int(tokens.get("output"), "output", self.name) + as_int(tokens.get("reasoning"), "reasoning", self.name)
            cost += as_cost(part.get("cost"), 0, self.name) or 0.0
        texts = [str((e.get("part") or {}).get("text") or "") for e in events if e.get("type") == "text"]
        error = None
        if errors:
            detail = errors[-1].get("error") or errors[-1]
            error = "opencode: " + json.dumps(detail)[:300]
        return AgentUsage(tokens_in, tokens_out, as_cost(cost, tokens_in + tokens_out, self.name), len(steps),
                          sum(1 for e in events if e.get("type") == "tool_use"), texts[-1] if texts else "",
                          cached_input_tokens=cached, error=error)
