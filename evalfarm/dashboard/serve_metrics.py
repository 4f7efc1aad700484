"""``/metrics`` of ``evalfarm serve``: the state dir's stored runs and, with --broker, the farm.

Figures are computed at scrape time from what is on disk and in Redis, so they are gauges
(a deleted run lowers them): ``evalfarm_state_*`` sum every stored report, ``evalfarm_last_run_*``
describe the newest run of each spec (alert on ``evalfarm_last_run_passed == 0``), and
``evalfarm_farm_*`` / ``evalfarm_queue_*`` come from the run store and kombu's queues. The worker
processes export the live counters (``evalfarm_items_total`` ...) themselves: see metrics.py.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .state import State


def _ts(value: str) -> float | None:
    try:
        return datetime.fromisoformat(value).timestamp()
    except (TypeError, ValueError):
        return None


class StateCollector(Collector):
    def __init__(self, state: State) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = self.state.runs.rows()  # every stored run's summary, newest first
        yield from self._state(rows)
        if self.state.broker:
            yield from self._farm(self.state.farm.snapshot())

    def _state(self, rows: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily("evalfarm_state_runs", "Stored runs in the state dir, by result", labels=["result"])
        by_result: dict[str, int] = {}
        items: dict[tuple[str, str], int] = {}
        modes: dict[tuple[str, str], int] = {}
        spend: dict[tuple[str, str], float] = {}
        newest: dict[str, dict[str, Any]] = {}
        for r in rows:  # newest first
            by_result[r["verdict"]] = by_result.get(r["verdict"], 0) + 1
            newest.setdefault(r["spec_name"], r)
            for a, f in r["per_adapter"].items():
                for status, n in (("passed", f["passed"]), ("failed", max(0, f["measured"] - f["passed"])),
                                  ("errored", f["errors"])):
                    items[(a, status)] = items.get((a, status), 0) + n
                for m, n in f["failure_modes"].items():
                    modes[(a, m)] = modes.get((a, m), 0) + n
                for kind, v in (("model", f["cost_usd"]), ("judge", f["judge_cost_usd"])):
                    spend[(a, kind)] = spend.get((a, kind), 0.0) + (v or 0.0)
        for result, n in sorted(by_result.items()):
            runs.add_metric([result], n)
        yield runs
        g = GaugeMetricFamily("evalfarm_state_items", "Items in every stored report, by adapter and status "
                              "(passed, failed, errored)", labels=["adapter", "status"])
        for (a, s), n in sorted(items.items()):
            g.add_metric([a, s], n)
        yield g
        g = GaugeMetricFamily("evalfarm_state_failures", "Failed items in every stored report, by failure mode",
                              labels=["adapter", "failure_mode"])
        for (a, m), n in sorted(modes.items()):
            g.add_metric([a, m], n)
        yield g
        g = GaugeMetricFamily("evalfarm_state_spend_usd", "Spend recorded in every stored report (model, judge)",
                              labels=["adapter", "kind"])
        for (a, k), v in sorted(spend.items()):
            g.add_metric([a, k], v)
        yield g
        passed = GaugeMetricFamily("evalfarm_last_run_passed", "1 if the newest run of the spec passed its "
                                   "thresholds, else 0", labels=["spec", "result"])
        when = GaugeMetricFamily("evalfarm_last_run_timestamp_seconds", "When the newest run of the spec finished",
                                 labels=["spec"])
        last_items = GaugeMetricFamily("evalfarm_last_run_items", "Items of the newest run of the spec, by status",
                                       labels=["spec", "adapter", "status"])
        rate = GaugeMetricFamily("evalfarm_last_run_pass_rate", "Pass rate of the newest run of the spec (0-1)",
                                 labels=["spec", "adapter"])
        overall = GaugeMetricFamily("evalfarm_last_run_overall_score", "Overall score of the newest run of the spec",
                                    labels=["spec", "adapter"])
        cost = GaugeMetricFamily("evalfarm_last_run_spend_usd", "Spend of the newest run of the spec",
                                 labels=["spec", "kind"])
        for spec, r in sorted(newest.items()):
            passed.add_metric([spec, r["verdict"]], 1 if r["verdict"] == "PASS" else 0)
            t = _ts(r["finished_at"])
            if t is not None:
                when.add_metric([spec], t)
            for a, f in r["per_adapter"].items():
                for status, n in (("passed", f["passed"]), ("failed", max(0, f["measured"] - f["passed"])),
                                  ("errored", f["errors"])):
                    last_items.add_metric([spec, a, status], n)
                if f["pass_rate"] is not None:
                    rate.add_metric([spec, a], f["pass_rate"])
                if f["overall"] is not None:
                    overall.add_metric([spec, a], f["overall"])
            cost.add_metric([spec, "model"], r["cost"]["model_usd"])
            cost.add_metric([spec, "judge"], r["cost"]["judge_usd"])
        yield from (passed, when, last_items, rate, overall, cost)

    def _farm(self, snap: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("evalfarm_farm_up", "1 if serve could read the farm's Redis")
        up.add_metric([], 1 if snap.get("ok") else 0)
        yield up
        if not snap.get("ok"):
            return
        depth = GaugeMetricFamily("evalfarm_queue_depth", "Messages waiting in a pool's queue", labels=["pool"])
        unacked = GaugeMetricFamily("evalfarm_queue_unacked", "Messages delivered to workers, not yet acknowledged",
                                    labels=["pool"])
        for q in snap["queues"]:
            depth.add_metric([q["pool"]], q["queued"])
            unacked.add_metric([q["pool"]], q["unacked"])
        yield depth
        yield unacked
        states: dict[str, int] = {}
        done = GaugeMetricFamily("evalfarm_farm_run_items_done", "Items finished in a run in the store",
                                 labels=["run_id", "spec"])
        total = GaugeMetricFamily("evalfarm_farm_run_items_planned", "Items planned in a run in the store",
                                  labels=["run_id", "spec"])
        errors = GaugeMetricFamily("evalfarm_farm_run_errors", "Items of a run that errored", labels=["run_id", "spec"])
        spend = GaugeMetricFamily("evalfarm_farm_run_spend_usd", "Spend of a run so far (model and judge)",
                                  labels=["run_id", "spec"])
        active = GaugeMetricFamily("evalfarm_farm_run_active", "1 while a run in the store is being worked on "
                                   "(planning, dispatching, running), 0 once done, failed or cancelled",
                                   labels=["run_id", "spec"])
        for r in snap["runs"]:
            states[r["state"] or "?"] = states.get(r["state"] or "?", 0) + 1
            labels = [r["run_id"], r["spec_name"]]
            active.add_metric(labels, 1 if r["state"] in ("planning", "dispatching", "running") else 0)
            done.add_metric(labels, r["done"])
            total.add_metric(labels, r["total"])
            errors.add_metric(labels, r["errors"])
            spend.add_metric(labels, r["spend_usd"])
        runs = GaugeMetricFamily("evalfarm_farm_runs", "Runs in the farm's store (newest 50), by state",
                                 labels=["state"])
        for s, n in sorted(states.items()):
            runs.add_metric([s], n)
        yield from (runs, active, done, total, errors, spend)
        workers = GaugeMetricFamily("evalfarm_workers", "Workers with a live heartbeat key")
        workers.add_metric([], len(snap["workers"]))
        yield workers
        age = GaugeMetricFamily("evalfarm_worker_heartbeat_age_seconds", "Seconds since a worker's last heartbeat",
                                labels=["worker"])
        for w in snap["workers"]:
            if w["age_s"] is not None:
                age.add_metric([w["name"]], w["age_s"])
        yield age
        pauses = GaugeMetricFamily("evalfarm_rate_limit_pause_remaining_seconds", "429 pauses in force, per endpoint",
                                   labels=["endpoint"])
        for p in snap["pauses"]:
            pauses.add_metric([p["endpoint"]], p["remaining_ms"] / 1000)
        yield pauses


def exposition(state: State) -> tuple[bytes, str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(state))
    from ..exposition import render

    return render(registry)
