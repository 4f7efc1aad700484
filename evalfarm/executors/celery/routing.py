"""Which queue a run's items go to, read from the run's stored meta: agent adapters' items to the spawn
queue (one task each, spawn.py), ``batch: true`` adapters' items to their provider's batch API
(batches.py), the rest in batches to the provider queue. Pure functions over the meta: the coordinator
asks them before it imports the heavier modules that route (a plain run imports neither)."""
from __future__ import annotations

from typing import Any

PROVIDER_MAX = {"openai": 50_000, "anthropic": 100_000}  # requests a provider's batch takes at most


def _adapters(meta: dict[str, Any] | None) -> list[Any]:
    return ((meta or {}).get("spec") or {}).get("adapters") or []


def agent_adapters(meta: dict[str, Any] | None) -> set[str]:
    """The run's adapters that are coding agents (their items go to the spawn queue)."""
    return {a["id"] for a in _adapters(meta) if isinstance(a, dict) and a.get("provider") == "agent"}


def batched_adapters(meta: dict[str, Any] | None) -> dict[str, str]:
    """{adapter id: provider} of the run's ``batch: true`` adapters (from its stored spec)."""
    out = {}
    for entry in _adapters(meta):
        if isinstance(entry, dict) and entry.get("batch") and entry.get("provider", "openai") in PROVIDER_MAX:
            out[str(entry.get("id"))] = str(entry.get("provider", "openai"))
    return out
