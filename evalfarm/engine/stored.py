"""Stored outputs as the model under test: re-scoring a run without calling its model again.

A re-scoring run names each of the source run's adapters with ``provider: stored``: the
``stored`` adapter holds no endpoint and is never called (its ``complete`` refuses), so
a worker can build the run's engine and judge its items, and nothing can reach the
model by mistake. ``replay`` turns a stored outcome back into stage 1 of an item: the
same ``Engine.score`` a fresh call goes through (checks, truncation), on the stored text.
"""
from __future__ import annotations

import time
from typing import Any

from ..core.outcome import Outcome
from ..core.plan import Item
from ..spec.models import AdapterSpec
from .adapters import Completion
from .items import Engine

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


def replay(engine: Engine, item: Item, stored: dict[str, Any]) -> Outcome:
    """Stage 1 of ``item`` from a stored outcome: the stored output scored by this run's checks. The
    model's tokens and latency are the stored ones; its cost is 0 (nothing was spent on it here). An
    item whose model call errored stays errored (there is no output); a judge error is forgotten (the
    output is there and this run judges it again)."""
    out = Outcome(key=item.key, prompt_id=item.prompt.id, adapter=item.adapter, trial=item.trial)
    error = stored.get("error")
    if error and (error.get("stage") or "adapter") != "judge":
        out.error, out.attempts = dict(error), stored.get("attempts")
        return out
    completion = Completion(text=stored.get("output") or "", finish_reason=stored.get("finish_reason") or "stop",
                            input_tokens=int(stored.get("input_tokens") or 0),
                            output_tokens=int(stored.get("output_tokens") or 0), cost_usd=0.0,
                            meta={"attempts": stored.get("attempts")})
    out = engine.score(item, out, completion, time.perf_counter())
    out.latency_ms, out.wait_ms = stored.get("latency_ms"), stored.get("wait_ms")
    return out
