"""Adapters for tests, loaded through EVALFARM_PLUGINS like any user plugin."""
from __future__ import annotations

import asyncio

from evalfarm import Completion, register_adapter


class Broken:
    """Always fails, like a provider with a bad key."""

    def __init__(self, adapter_id: str) -> None:
        self.id = adapter_id

    def config(self):
        return {"kind": "broken", "id": self.id}

    async def complete(self, prompt, trial):
        raise ConnectionError("provider unreachable")


class Slow:
    """Echo after a delay (``slow:<ms>``), for runs that must last a while."""

    def __init__(self, adapter_id: str) -> None:
        self.id = adapter_id
        self.delay = int(adapter_id.split(":", 1)[1]) / 1000 if ":" in adapter_id else 0.05

    def config(self):
        return {"kind": "slow", "id": self.id}

    async def complete(self, prompt, trial):
        await asyncio.sleep(self.delay)
        return Completion(text=f"[{self.id}] {prompt.text}")


register_adapter("broken", Broken)
register_adapter("slow", Slow)
