"""The result of one item: what was called, what came back, how it was scored."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Outcome:
    """``error`` set means nothing was measured (a runtime error, never a quality verdict)."""

    key: str
    prompt_id: str
    adapter: str
    trial: int
    output: str | None = None
    golden_passed: bool | None = None  # expected_* assertions and every check (all deterministic)
    golden_reason: str | None = None
    checks: list[dict[str, Any]] | None = None
    judge_score: float | None = None
    judge_criteria: list[dict[str, Any]] | None = None
    judge_reason: str | None = None
    passed: bool | None = None  # the item's quality verdict (core.verdict); None when nothing was measured
    failure_mode: str | None = None
    latency_ms: float | None = None  # the answered provider request's own round trip, the same in every backend
    wait_ms: float | None = None  # time before it: limiter slots, failed attempts and their backoff
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    judge_input_tokens: int = 0
    judge_output_tokens: int = 0
    judge_cost_usd: float = 0.0
    attempts: int | None = None
    cached: bool = False  # served by the response cache: tokens of the original call, cost 0
    error: dict[str, Any] | None = None
    # a coding agent's run (spawn mode): agent, version, turns, tool calls, diff, check, ... (agents/adapter.py)
    agent: dict[str, Any] | None = None
    # why this item's call was never sent ("budget": the run's spend reached its budget first); a
    # skipped item is neither measured nor errored, and stays out of the report's figures
    skipped: str | None = None
    # an agent item's failure class (core/failure.py): passed, agent_failed, agent_timeout, verifier_failed,
    # infra_failed, budget_stopped
    failure_class: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # shallow: dataclasses.asdict deep-copies every field and was 11% of an embedded run;
        # optional records left out when unset, so runs without agents or budgets keep their bytes
        data = dict(self.__dict__)
        for optional in ("agent", "skipped", "failure_class"):
            if data[optional] is None:
                del data[optional]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Outcome":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
