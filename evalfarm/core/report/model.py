"""What a report is: ``RunReport`` (the Python API's object) and what does not depend on the work done."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..verdict import exit_code

SCHEMA = "evalfarm.report/1"
# Fields that depend on when and how a run happened, not on what it measured.
VOLATILE = ("run_id", "mode", "started_at", "finished_at", "duration_s")
VOLATILE_FIGURES = ("latency_ms_p50", "latency_ms_p95")
VOLATILE_OUTCOME = ("latency_ms", "wait_ms")


@dataclass
class RunReport:
    """The report as a Python object (the Python API); ``to_dict`` is the JSON file's content."""

    run_id: str
    spec_name: str
    lineage_tag: str
    spec_hash: str
    mode: str
    trials: int
    adapters: list[str]
    judge: dict[str, Any] | None
    thresholds: dict[str, Any]
    per_adapter: dict[str, dict[str, Any]]
    threshold_failures: list[str]
    thresholds_passed: bool
    nothing_measured: bool
    cost: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    items_planned: int = 0
    items_done: int = 0
    stopped: str | None = None  # "interrupted" (Ctrl-C), "budget", "cancelled": a partial report
    budget: dict[str, Any] | None = None  # limit_usd, spent_usd, items_left (runs with a budget)
    schema: str = SCHEMA
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        if out["budget"] is None:  # only runs with a budget carry the section
            del out["budget"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunReport":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    @property
    def exit_code(self) -> int:
        return exit_code(self.to_dict())


def stable_view(report: dict[str, Any]) -> dict[str, Any]:
    """The report without timing and run identity: equal for equal work in any backend."""
    out = {k: v for k, v in report.items() if k not in VOLATILE}
    out["per_adapter"] = {a: {k: v for k, v in f.items() if k not in VOLATILE_FIGURES}
                          for a, f in report["per_adapter"].items()}
    out["outcomes"] = [{k: v for k, v in o.items() if k not in VOLATILE_OUTCOME} for o in report.get("outcomes", [])]
    return out
