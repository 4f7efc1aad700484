"""What a budgeted run spent, in parts that add up to the spend counter's total.

The report's ``cost`` counts the items measured (model + judge, per adapter). A run the budget
stopped also paid for answers whose judge call it stopped (not measured, so not in the figures:
``budget.unjudged_usd``), and on the farm the fleet-wide counter can hold calls whose results were
not kept (a batch retried after an infrastructure error pays again). The line names every part, so
model + judge + unjudged + other = spent.
"""
from __future__ import annotations

from typing import Any

EPS = 5e-7  # below what the line's six decimals show


def spend_parts(summary: dict[str, Any]) -> str:
    """``model $A + judge $B on the N items measured + $C on M answers not judged (+ $D other)``."""
    b = summary.get("budget") or {}
    cost = summary.get("cost") or {}
    model, judge = float(cost.get("model_usd") or 0.0), float(cost.get("judge_usd") or 0.0)
    unjudged, n_unjudged = float(b.get("unjudged_usd") or 0.0), int(b.get("unjudged_items") or 0)
    other = float(b.get("spent_usd") or 0.0) - model - judge - unjudged
    text = f"model ${model:.6f} + judge ${judge:.6f} on the {summary.get('items_done', 0)} items measured"
    if n_unjudged or unjudged >= EPS:
        text += f" + ${unjudged:.6f} on {n_unjudged} answer(s) whose judge call the budget stopped"
    if abs(other) >= EPS:
        text += (f" {'+' if other > 0 else '-'} ${abs(other):.6f} the run's spend counter holds beyond its stored "
                 "items (calls whose results were not kept, e.g. a retried batch)")
    return text
