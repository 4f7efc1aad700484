"""A scripted adapter for the CI tests, loaded through EVALFARM_PLUGINS like any user plugin.

``follow`` obeys its system prompt the way a model would, deterministically: it answers
with the system prompt followed by the user text. A prompt version that drops an
instruction (a token a case expects) therefore makes that case fail: a real regression,
caused by what was sent.
"""
from __future__ import annotations

from evalfarm import Completion, register_adapter


class Follow:
    def __init__(self, adapter_id: str) -> None:
        self.id = adapter_id

    def config(self):
        return {"kind": "follow", "id": self.id, "version": 1}

    async def complete(self, prompt, trial):
        text = f"{prompt.system or ''}\n{prompt.text}".strip()
        return Completion(text=text, input_tokens=len(text.split()), output_tokens=len(text.split()))


register_adapter("follow", Follow)
