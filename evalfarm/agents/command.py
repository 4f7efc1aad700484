"""Any CLI as an agent: a command template with ``{prompt}``, ``{workdir}``, ``{model}``,
``{base_url}``, ``{addendum}`` and ``{usage_file}``.

The template is split like a shell line first, then the placeholders are filled in each word, so a
prompt with spaces or quotes stays one argument and nothing is ever interpreted by a shell. Without
``{addendum}`` in the template, a non-empty addendum is prepended to the prompt. Usage comes from an
optional JSON file the command writes at ``{usage_file}`` (also in EVALFARM_USAGE_FILE):
``{"input_tokens", "output_tokens", "cost_usd", "turns", "tool_calls", "final_message", "models"}``,
every key optional. Without it the run has no usage (zeros, cost None) and the final message is stdout.
"""
from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from .base import AgentRequest, AgentUsage, Driver, Invocation, Scratch, as_cost, as_int
from .errors import AgentOutputError, AgentSetupError

PLACEHOLDERS = ("prompt", "workdir", "model", "base_url", "addendum", "usage_file")
_FIELD = re.compile(r"\{([a-z_]+)\}")


class CommandDriver(Driver):
    name = "command"
    binary = ""
    package = ""
    pin = ""
    key_env = None

    def __init__(self, template: str) -> None:
        try:
            words = shlex.split(template)
        except ValueError as exc:
            raise AgentSetupError(f"command: the template is not a valid command line ({exc})") from None
        if not words:
            raise AgentSetupError("command: the template is empty; give a command such as `my-agent {prompt}`")
        unknown = sorted({m for w in words for m in _FIELD.findall(w)} - set(PLACEHOLDERS))
        if unknown:
            raise AgentSetupError(f"command: unknown placeholder {{{unknown[0]}}}; use "
                                  + ", ".join("{" + p + "}" for p in PLACEHOLDERS))
        if "{" in words[0]:
            raise AgentSetupError("command: the program (first word) cannot be a placeholder")
        self.template, self.words = template, words
        self.binary = words[0]

    def build(self, request: AgentRequest, binary: Path, workdir: Path, scratch: Scratch) -> Invocation:
        env = self.environment(request, scratch)
        usage_file = scratch.private / "usage.json"
        prompt = request.prompt
        if request.addendum and "{addendum}" not in self.template:
            prompt = f"{request.addendum}\n\n{prompt}"
        values = {"prompt": prompt, "workdir": str(workdir), "model": request.model,
                  "base_url": request.base_url or "", "addendum": request.addendum, "usage_file": str(usage_file)}
        argv = [str(binary)] + [_FIELD.sub(lambda m: values[m.group(1)], w) for w in self.words[1:]]
        env["EVALFARM_USAGE_FILE"] = str(usage_file)
        return Invocation([*argv, *request.extra_args], env, outputs={"usage": usage_file})

    def parse(self, stdout: str, invocation: Invocation) -> AgentUsage:
        path = invocation.outputs["usage"]
        if not path.exists() and not path.is_symlink():
            return AgentUsage(0, 0, None, 0, 0, stdout.strip()[-2000:])
        try:  # the agent wrote it: a symlink to a file of the worker's is not followed
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = json.loads(f.read(16 * 2**20).decode("utf-8"))
        except OSError:
            raise AgentOutputError("command: its usage file is not a regular file") from None
        except (ValueError, UnicodeDecodeError):
            raise AgentOutputError("command: its usage file is not JSON") from None
        if not isinstance(data, dict):
            raise AgentOutputError("command: its usage file is not a JSON object")
        unknown = set(data) - {"input_tokens", "output_tokens", "cost_usd", "turns", "tool_calls", "final_message",
                               "models"}
        if unknown:
            raise AgentOutputError(f"command: unknown key {sorted(unknown)[0]!r} in its usage file")
        tokens_in = as_int(data.get("input_tokens"), "input_tokens", self.name)
        tokens_out = as_int(data.get("output_tokens"), "output_tokens", self.name)
        final = data.get("final_message", stdout.strip()[-2000:])
        models = data.get("models", [])
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            raise AgentOutputError("command: `models` in its usage file is not a list of names")
        return AgentUsage(tokens_in, tokens_out, as_cost(data.get("cost_usd"), 0, self.name),
                          as_int(data.get("turns"), "turns", self.name), as_int(data.get("tool_calls"), "tool_calls", self.name),
                          str(final), models=tuple(models))
