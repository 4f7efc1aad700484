"""One pass over a run's stored outcomes: the figures, the failed items the Markdown lists, and the
outcome lines of the report file (a 100,000-item report is never a list in memory)."""
from __future__ import annotations

import json
from typing import Any

from ...spec.models import EvalSpec
from ..aggregate import Aggregator, nothing_measured, run_cost, threshold_failures
from ..verdict import item_passed
from ..why import ErrorExamples
from .model import SCHEMA

FAILED_SAMPLE = 50  # failed items the Markdown lists


class ReportBuilder:
    """One pass over a run's stored outcomes (JSON text, plan order): figures, the failed items
    the Markdown lists, and the outcome lines of the report file."""

    def __init__(self, spec: EvalSpec, trials: int) -> None:
        self.spec, self.trials = spec, trials
        self.agg = Aggregator(spec.adapter_ids, trials, spec.judge.weight if spec.judge else None)
        self.errors = ErrorExamples(spec)
        self.failed: list[dict[str, Any]] = []
        self.count = 0
        self.skipped = 0  # items whose call was never sent (the budget ran out): not in the figures
        self.spend = 0.0  # model + judge cost of every stored item, skipped ones included
        self.unjudged = 0.0  # of which: answers paid for whose judge call the budget stopped (not in the figures)
        self.unjudged_items = 0

    def add(self, raw: str) -> str | None:
        """Aggregate one stored outcome; returns its line in the report file (None for a skipped item,
        which the report counts as left, not as an outcome)."""
        o = self.last = json.loads(raw)  # the parsed outcome, for a caller that indexes the line
        cost = (o.get("cost_usd") or 0.0) + (o.get("judge_cost_usd") or 0.0)
        self.spend += cost
        if o.get("skipped"):
            self.skipped += 1
            if cost:
                self.unjudged += cost
                self.unjudged_items += 1
            if isinstance(o.get("agent"), dict):  # an agent task never sent: budget_stopped in its adapter's classes
                self.agg.add(o)
            return None
        self.agg.add(o)
        self.errors.add(o)
        if len(self.failed) < FAILED_SAMPLE and (o.get("error") or item_passed(o) is False):
            self.failed.append(o)
        self.count += 1
        return raw

    def head(self, **run: Any) -> dict[str, Any]:
        """The report without its outcomes. ``run``: run_id, spec_hash, mode, started_at,
        finished_at, duration_s, items_planned and stopped; with a budget, budget_usd and
        spent_usd (the run's spend counter, when the backend keeps one)."""
        if self.skipped and not run.get("stopped"):
            run["stopped"] = "budget"
        per_adapter = self.agg.figures()
        for adapter, fig in per_adapter.items():
            fig["error_examples"] = self.errors.of(adapter)
        failures = threshold_failures(per_adapter, self.spec.thresholds)
        empty = nothing_measured(per_adapter)
        spec = self.spec
        return {
            "schema": SCHEMA, "run_id": run["run_id"], "spec_name": spec.name, "lineage_tag": spec.tag,
            "spec_hash": run["spec_hash"], "mode": run["mode"], "trials": self.trials, "adapters": spec.adapter_ids,
            "judge": spec.judge.model_dump() if spec.judge else None, "thresholds": spec.thresholds.model_dump(),
            "per_adapter": per_adapter, "threshold_failures": failures,
            "thresholds_passed": not failures and not empty and not run.get("stopped"), "nothing_measured": empty,
            "cost": run_cost(per_adapter), "started_at": run["started_at"], "finished_at": run["finished_at"],
            "duration_s": round(run["duration_s"], 3), "items_planned": run["items_planned"],
            "items_done": self.count, "stopped": run.get("stopped"),
            # spawn mode: the repo and the commit every agent started from (absent for other runs)
            **({"workspace": spec.workspace.model_dump(mode="json")} if spec.workspace is not None else {}),
            **({"budget": self.budget(run)} if run.get("budget_usd") is not None else {}),
        }

    def budget(self, run: dict[str, Any]) -> dict[str, Any]:
        """The budget, what was spent against it (model + judge: the backend's spend counter, else every
        stored item's cost, a model answer whose judging the stop skipped included) and the items left."""
        spent = run.get("spent_usd")
        return {"limit_usd": run["budget_usd"], "spent_usd": round(self.spend if spent is None else spent, 8),
                "items_left": run["items_planned"] - self.count,
                # spent beyond the figures' model + judge: answers whose judging the stop skipped
                "unjudged_usd": round(self.unjudged, 8), "unjudged_items": self.unjudged_items}
