"""aider (`aider --message=...`): usage from its analytics log (one ``message_send`` event per model
call, with tokens and cost), written to a file we name outside the worktree.

aider has no tools: it edits by SEARCH/REPLACE blocks in the reply; ``tool_calls`` counts the
"Applied edit to" lines. The addendum is a read-only file (``--read``); the model goes through litellm
as ``openai/<model>`` at our endpoint, with a metadata file (context size, and the price when the
request gives one: otherwise aider reports 0 for an unknown model and the caller prices). Update
checks, analytics upload, auto-commits, repo map and URL detection are off; LITELLM_LOCAL_MODEL_COST_MAP
stops litellm's price-table download.
"""
from __future__ import annotations

import json
from pathlib import Path

from .pins import AIDER
from .base import AgentRequest, AgentUsage, Driver, Invocation, Scratch, as_cost, as_int, openai_url
from .errors import AgentOutputError

FLAGS = ("--edit-format", "diff", "--no-check-update", "--analytics-disable", "--no-show-release-notes",
         "--no-gitignore", "--no-auto-commits", "--no-dirty-commits", "--yes-always", "--no-pretty",
         "--no-stream", "--no-show-model-warnings", "--map-tokens", "0", "--no-detect-urls", "--no-fancy-input")


class AiderDriver(Driver):
    name = "aider"
    binary = "aider"
    package = "aider-chat"
    pin = AIDER
    key_env = "OPENAI_API_KEY"
    quiet_env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    trajectory_files = {"events": "aider-events.jsonl", "chat": "aider-chat.md"}

    def build(self, request: AgentRequest, binary: Path, workdir: Path, scratch: Scratch) -> Invocation:
        env = self.environment(request, scratch)
        private = scratch.private
        model = request.model if "/" in request.model or not request.base_url else f"openai/{request.model}"
        meta: dict = {"max_tokens": 8192, "max_input_tokens": 128000, "max_output_tokens": 8192,
                      "litellm_provider": "openai", "mode": "chat"}
        if request.price:
            meta.update(input_cost_per_token=request.price.input / 1e6, output_cost_per_token=request.price.output / 1e6)
        files = {private / "aider-model-metadata.json": json.dumps({model: meta})}
        outputs = {k: private / name for k, name in self.trajectory_files.items()}
        argv = [str(binary), f"--model={model}", *FLAGS, f"--model-metadata-file={private / 'aider-model-metadata.json'}",
                f"--analytics-log={outputs['events']}", f"--chat-history-file={outputs['chat']}",
                f"--input-history-file={private / 'aider-input.hist'}"]
        if request.base_url:
            argv.append(f"--openai-api-base={openai_url(request.base_url)}")
        if request.addendum:
            files[private / "instructions.md"] = request.addendum + "\n"
            argv.append(f"--read={private / 'instructions.md'}")
        return Invocation([*argv, *request.extra_args, f"--message={request.prompt}"], env, files, outputs)

    def parse(self, stdout: str, invocation: Invocation) -> AgentUsage:
        path = invocation.outputs["events"]
        if not path.exists():
            raise AgentOutputError(f"aider: it wrote no analytics log ({path.name})")
        events = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                raise AgentOutputError(f"aider: its analytics log has a line that is not JSON: {line[:80]!r}") from None
        sends = [e.get("properties") or {} for e in events if isinstance(e, dict) and e.get("event") == "message_send"]
        tokens_in = sum(as_int(p.get("prompt_tokens"), "prompt_tokens", self.name) for p in sends)
        tokens_out = sum(as_int(p.get("completion_tokens"), "completion_tokens", self.name) for p in sends)
        cost = sum(as_cost(p.get("cost"), 0, self.name) or 0.0 for p in sends)
        exits = [e for e in events if isinstance(e, dict) and e.get("event") == "exit"]
        if not exits:
            raise AgentOutputError("aider: its analytics log has no exit event (cut short?)")
        reason = str((exits[-1].get("properties") or {}).get("reason") or "")
        error = None if reason.startswith("Completed") else f"aider: exit: {reason[:300]}"
        applied = sum(1 for line in stdout.splitlines() if line.startswith("Applied edit to "))
        models = tuple(dict.fromkeys(str(p["main_model"]) for p in sends if p.get("main_model")))
        return AgentUsage(tokens_in, tokens_out, as_cost(cost, tokens_in + tokens_out, self.name), len(sends),
                          applied, _last_reply(invocation.outputs["chat"]), error=error, models=models)


def _last_reply(chat: Path) -> str:
    """The model's last reply from aider's chat history (markdown: ``#### `` lines are the user's,
    ``> `` lines aider's own output, the rest the model's)."""
    try:
        lines = chat.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    last_user = max((i for i, line in enumerate(lines) if line.startswith("#### ")), default=-1)
    reply = [line for line in lines[last_user + 1:] if not (line.startswith("> ") or line == ">")]
    return "\n".join(reply).strip()[-4000:]
