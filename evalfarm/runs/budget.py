"""A run's spend budget, before and after: the estimate and the check before anything is sent, and
what a stopped run says. No printing here: the caller shows ``lines``.

The budget is ``--max-cost`` (it wins) or the spec's ``budget_usd``. A run estimated above its
budget does not start (exit 2) unless forced; an adapter without a price cannot be estimated and
is refused unless forced. During the run the executor's spend guard stops sending at the budget.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..errors import EXIT_FAILED, EXIT_USAGE, EvalfarmError


class BudgetError(EvalfarmError):
    exit_code = EXIT_USAGE


class BudgetStopped(EvalfarmError):
    """A run the budget stopped where only a whole run means anything (an A/B comparison)."""

    exit_code = EXIT_FAILED


@dataclass
class BudgetCheck:
    budget: float | None  # the run's budget in USD (None: no budget)
    lines: list[str] = field(default_factory=list)  # the estimate, and a forced start, to show the user
    refusal: str | None = None  # why the run must not start (the budget cannot cover it, not forced)

    def enforce(self) -> float | None:
        """The budget, or BudgetError (exit 2) when the run must not start: call after showing ``lines``."""
        if self.refusal:
            raise BudgetError(self.refusal)
        return self.budget


def check(spec: Any, prompts: Iterable[Any], trials: int | None, max_cost: float | None, force: bool,
          prices: Mapping[str, Any] | None = None, priced_only: bool = True) -> BudgetCheck:
    """Estimate the run before anything is sent (shown with a budget, or when ``priced_only`` and
    something in the run has a price); a run its budget cannot cover is refused unless ``force``
    (``BudgetCheck.enforce``)."""
    from ..engine.budget import budget_problem, estimate

    budget = max_cost if max_cost is not None else getattr(spec, "budget_usd", None)
    flag = "--max-cost" if max_cost is not None else "budget_usd"
    out = BudgetCheck(budget)
    if budget is None and not priced_only:
        return out
    est = estimate(spec, prompts, trials, prices)
    if budget is not None or est.total_usd > 0:
        out.lines.append(est.line() + (f"; budget ${budget:g} ({flag})" if budget is not None else ""))
    if budget is not None:
        problem = budget_problem(est, budget, flag)
        if problem and not force:
            out.refusal = problem
        elif problem:
            out.lines.append("--force: starting anyway; sending stops when the spend reaches the budget")
    return out


def stopped_line(summary: dict[str, Any]) -> str | None:
    """One line for a run the budget stopped: the spend, in parts that add up to it (``runs.spend``)."""
    b = summary.get("budget") or {}
    if summary.get("stopped") != "budget" or not b:
        return None
    from .spend import spend_parts

    return (f"stopped at the budget: ${b['spent_usd']:.6f} spent of ${b['limit_usd']:g} ({spend_parts(summary)}); "
            f"{b['items_left']} of {summary.get('items_planned')} items were not measured (never sent, or their "
            "judge call was not); the partial report says stopped: budget (diff, gate and baselines refuse it)")


def quota_line(summary: dict[str, Any]) -> str | None:
    """One line for a run that met an exhausted quota."""
    count, example = 0, None
    for f in (summary.get("per_adapter") or {}).values():
        e = (f.get("error_examples") or {}).get("QuotaExhausted")
        if e:
            count += e["count"]
            example = example or e.get("example")
    if not count:
        return None
    return (f"quota exhausted (HTTP 429 insufficient_quota): not retried; the endpoint was paused for the whole "
            f"fleet and {count} item(s) ended as runtime_error QuotaExhausted, most without a request "
            f"(e.g. {str(example)[:160]})")


def affordable(spec: Any, prompts: Iterable[Any], trials: int | None, left_usd: float,
               prices: Mapping[str, Any] | None = None) -> bool:
    """Whether ``left_usd`` covers the estimate of ``trials`` more trials (a sequential A/B asks before
    each round). What has no price counts as $0, as in a run forced past that refusal."""
    from ..engine.budget import estimate

    return estimate(spec, prompts, trials, prices).total_usd <= left_usd


def estimate_of(spec: Any, prompts: Iterable[Any], trials: int | None, prices: Mapping[str, Any] | None = None):
    """The run's cost estimate (``engine.budget.Estimate``: ``line()``, ``total_usd``, ``as_dict()``), for a
    plan shown before anything is sent."""
    from ..engine.budget import estimate

    return estimate(spec, prompts, trials, prices)
