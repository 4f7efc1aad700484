"""``evalfarm run --gate --until-decided``: the rounds. Each round is one submission of trial r of every
case (``runs.submit.start``: in this process, or one batch on the farm), saved like any run; between
rounds the coordinator updates the sequential gate (``ci.sequential_gate``) and stops at its first
call, at ``max_trials`` rounds, or before a round the budget cannot pay for (``runs.budget``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..runs.budget import affordable
from ..runs.submit import RunHandle, Target, start
from .sequential_gate import SequentialGate, pairing, round_pairs


@dataclass
class Rounds:
    runs: list[RunHandle]
    stopped_because: str  # "decided", "max_trials", "budget" or "interrupted"


def run_rounds(spec: Any, source: Any, target: Target, gate: SequentialGate, baseline: dict[str, Any], *,
               max_trials: int, options: dict[str, Any], where: Any = None, budget_usd: float | None = None,
               on_progress: Callable | None = None, on_round: Callable[[RunHandle, dict[str, Any]], None] | None = None,
               rates: dict[tuple[str, str], float]) -> Rounds:
    """``baseline``: its head; ``rates``: its pass rate per case (``ci.diff.case_rates`` of a streamed read)."""
    base_of = pairing(baseline, spec.adapter_ids)
    runs: list[RunHandle] = []
    spent = 0.0
    for r in range(max_trials):
        left = None if budget_usd is None else budget_usd - spent
        if left is not None and r > 0 and not affordable(spec, source, 1, left):
            return Rounds(runs, "budget")
        opts = {**options, "first_trial": r}
        if left is not None:
            opts["budget_usd"] = left
        run = start(spec, source, target, trials=1, options=opts, where=where, on_progress=on_progress)
        run.wait(on_progress)
        runs.append(run)
        summary = run.summary()
        spent += (summary.get("cost") or {}).get("total_usd") or 0.0
        if summary.get("stopped"):  # a round cut short (budget, Ctrl-C) is not compared
            if on_round is not None:
                on_round(run, {})
            return Rounds(runs, "budget" if summary["stopped"] == "budget" else "interrupted")
        state = gate.add(*round_pairs(rates, base_of, run.outcomes()))
        if on_round is not None:
            on_round(run, state)
        if state["decision"] != "open":
            return Rounds(runs, "decided")
    return Rounds(runs, "max_trials")
