"""A scripted flaky model for the flake-history tests, loaded through EVALFARM_PLUGINS.

``flipper`` answers every case with the text it expects, except the case ``wobbly``, which it
gets wrong on every other run: the run count lives in the file named by ``EF_FLIP_STATE``
(one increment each time a run builds the adapter), so successive runs alternate.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from evalfarm import Completion, register_adapter


def _next_run() -> int:
    path = Path(os.environ["EF_FLIP_STATE"])
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        n = int(fh.read().strip() or 0)
        fh.seek(0)
        fh.truncate()
        fh.write(str(n + 1))
    return n


class Flipper:
    def __init__(self, adapter_id) -> None:
        self.id = adapter_id if isinstance(adapter_id, str) else adapter_id.id
        self.run = _next_run()

    def config(self):
        return {"kind": "flipper", "id": self.id, "version": 1}

    async def complete(self, prompt, trial):
        wrong = prompt.id == "wobbly" and self.run % 2 == 1
        text = "no idea" if wrong else " ".join(prompt.expected_output_contains) or prompt.text
        return Completion(text=text, input_tokens=len(prompt.text.split()), output_tokens=len(text.split()))


register_adapter("flipper", Flipper)
