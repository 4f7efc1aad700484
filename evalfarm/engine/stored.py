"""Stored outputs as the model under test: re-scoring a run without calling its model again.

A re-scoring run names each of the source run's adapters with ``provider: stored``: the
``stored`` adapter holds no endpoint and is never called (its ``complete`` refuses), so
a worker can build the run's engine and judge its items, and nothing can reach the
model by mistake. A replay turns a stored outcome back into stage 1 of an item: the
same ``Engine.score`` a fresh call goes through (checks, truncation), on the stored text
(``Engine.replay``, used by every executor when the engine is given ``stored``).
"""
from __future__ import annotations

from typing import Any

from ..spec.models import AdapterSpec

PROVIDER = "stored"


class StoredAdapter:
    """Stands for a source run's adapter in a re-scoring run; never called."""

    def __init__(self, entry: "str | AdapterSpec") -> None:
        self.id = entry if isinstance(entry, str) else entry.id
        self.source = "" if isinstance(entry, str) else entry.model  # "stored:<source run id>"

    def config(self) -> dict[str, Any]:
        return {"kind": PROVIDER, "version": 1, "id": self.id, "source": self.source}

    async def complete(self, prompt, trial):  # pragma: no cover - a re-scoring run has no stage 1 call
        raise RuntimeError(f"adapter {self.id!r} stands for stored outputs ({self.source}): re-scoring never "
                           "calls the model under test")


def stored_adapter(adapter_id: str, source_run: str) -> AdapterSpec:
    return AdapterSpec(id=adapter_id, provider=PROVIDER, model=f"stored:{source_run}")
