"""What an agent run spent and did, as spend-ledger rows (``STATE/cost/ledger.jsonl``).

One row per agent item: ``evalfarm run`` appends them when it saves a run with agent adapters, and
``ab --executor spawn`` adds the arm's fields to the same agent fields (``ab/spawn.py``). Rows are
append-only and de-duplicated by their bytes (``ab/ledger.append_rows``), so saving a run twice
(``wait`` after ``run --detach``) adds nothing.
"""
from __future__ import annotations

from typing import Any

SCHEMA = "evalfarm.ledger/1"


def agent_fields(outcome: dict[str, Any]) -> dict[str, Any]:
    """The agent's own figures from an item's outcome (None where the run was not measured)."""
    info = outcome.get("agent") or {}
    measured = outcome.get("error") is None
    diff = info.get("diff") or {}
    check = info.get("check") or {}
    return {
        "agent": info.get("agent"), "agent_version": info.get("version"),
        "models": info.get("models"), "model_pin_ok": info.get("model_pin_ok"),
        "turns": info.get("turns") if measured else None,
        "tool_calls": info.get("tool_calls") if measured else None,
        "wall_s": info.get("wall_s"), "cost_source": info.get("cost_source") if measured else None,
        "diff_files": diff.get("files") if measured else None,
        "diff_lines": (diff["insertions"] + diff["deletions"]) if measured and diff else None,
        "patch_sha256": diff.get("patch_sha256"), "check_exit": check.get("exit_code"),
        "error_message": (outcome.get("error") or {}).get("message") if not measured else None,
    }


def run_rows(run_id: str, spec_name: str | None, outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per agent item of a saved run (items of other adapters have no row: their spend is in
    the report)."""
    rows = []
    for o in outcomes:
        if not isinstance(o, dict) or not isinstance(o.get("agent"), dict):
            continue
        measured = o.get("error") is None
        costed = measured and o["agent"].get("cost_source") is not None
        rows.append({"schema": SCHEMA, "source": "run", "run_id": run_id, "spec": spec_name, "item": o.get("key"),
                     "adapter": o.get("adapter"), "prompt_id": o.get("prompt_id"), "trial": o.get("trial"),
                     "input_tokens": o.get("input_tokens", 0) if measured else None,
                     "output_tokens": o.get("output_tokens", 0) if measured else None,
                     "cost_usd": round(float(o.get("cost_usd") or 0.0), 12) if costed else None,
                     "passed": o.get("passed"),
                     "error": (o.get("error") or {}).get("class") if not measured else None,
                     **agent_fields(o)})
    return rows
