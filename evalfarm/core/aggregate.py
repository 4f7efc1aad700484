"""Per-adapter figures and thresholds: pure functions over outcome dicts.

Streams outcomes once (``Aggregator.add``), so 100,000 items aggregate without holding
them all. Errored items are counted apart and never as quality failures; pass^k
comes from ``core.verdict``, so an errored trial is unmeasured here as in ``diff``.
"""
from __future__ import annotations

import math
from array import array
from collections import defaultdict
from typing import Any, Iterable

from ..spec.models import Thresholds
from . import failure
from .verdict import case_verdict, item_passed

UNMEASURED_EXAMPLES = 5  # agent items left out of the denominator, listed with their reasons


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile, ``q`` in [0, 100]; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _r(value: float | None, nd: int = 6) -> float | None:
    return None if value is None else round(value, nd)


class _Acc:
    def __init__(self, trials: int) -> None:
        self.items = self.measured = self.passed = self.errors = 0
        self.judge_sum, self.judge_n = 0.0, 0
        self.latencies = array("d")  # 8 bytes an item, not 32: a million-item run's aggregate stays small
        self.prompts: set[int] = set()  # the prompt ids' hashes: only their number is reported
        # prompt -> each trial's verdict (True, False, None: errored); only with trials > 1 (pass^k)
        self.trial_verdicts: dict[str, list[bool | None]] | None = defaultdict(list) if trials > 1 else None
        self.tokens_in = self.tokens_out = 0
        self.cost = 0.0
        self.error_classes: dict[str, int] = defaultdict(int)
        self.failure_modes: dict[str, int] = defaultdict(int)
        self.ok = 0  # items whose full verdict (checks and judge) passed
        self.cached = 0
        self.judge_in = self.judge_out = 0
        self.judge_cost = 0.0
        self.classes: dict[str, int] = defaultdict(int)  # agent items: failure class -> count (core/failure.py)
        self.unmeasured: list[dict[str, Any]] = []
        self.mismatched = 0  # agent items whose own account and the model relay's disagree (agents/trajectory.py)
        self.mismatches: list[dict[str, Any]] = []

    def add(self, o: dict[str, Any]) -> None:
        self.items += 1
        self.prompts.add(hash(o["prompt_id"]))
        self.tokens_in += o.get("input_tokens") or 0
        self.tokens_out += o.get("output_tokens") or 0
        self.cost += o.get("cost_usd") or 0.0
        self.judge_in += o.get("judge_input_tokens") or 0
        self.judge_out += o.get("judge_output_tokens") or 0
        self.judge_cost += o.get("judge_cost_usd") or 0.0
        if o.get("failure_mode"):
            self.failure_modes[o["failure_mode"]] += 1
        if o.get("cached"):
            self.cached += 1
        verdict = item_passed(o)
        if self.trial_verdicts is not None:
            self.trial_verdicts[o["prompt_id"]].append(verdict)
        cls = o.get("failure_class") or (failure.classify(o) if "agent" in o else None)
        if cls is not None:
            self.classes[cls] += 1
            if verdict is None and len(self.unmeasured) < UNMEASURED_EXAMPLES:
                self.unmeasured.append({"prompt_id": o["prompt_id"], "trial": o.get("trial", 0), "class": cls,
                                        "reason": failure.reason(o)})
        agent = o.get("agent") if isinstance(o.get("agent"), dict) else {}
        if agent.get("trajectory_mismatch"):
            self.mismatched += 1
            if len(self.mismatches) < UNMEASURED_EXAMPLES:
                self.mismatches.append({"prompt_id": o["prompt_id"], "trial": o.get("trial", 0),
                                        "why": str(agent["trajectory_mismatch"])[:300]})
        if o.get("error"):
            self.errors += 1
            self.error_classes[o["error"].get("class", "Error")] += 1
        if verdict is None and (o.get("error") or cls is not None):
            return  # unmeasured: a runtime error, or an agent item the agent is not to blame for
        self.measured += 1
        if o.get("golden_passed"):
            self.passed += 1
        if verdict:
            self.ok += 1
        if o.get("judge_score") is not None:
            self.judge_sum += o["judge_score"]
            self.judge_n += 1
        if o.get("latency_ms") is not None:
            self.latencies.append(o["latency_ms"])


class Aggregator:
    """Per-adapter figures from outcomes fed one at a time: 100,000 items aggregate without a list."""

    def __init__(self, adapters: list[str], trials: int, judge_weight: float | None) -> None:
        self.trials, self.judge_weight = trials, judge_weight
        self.accs = {a: _Acc(trials) for a in adapters}

    def add(self, outcome: dict[str, Any]) -> None:
        acc = self.accs.get(outcome["adapter"])
        if acc is None:
            acc = self.accs[outcome["adapter"]] = _Acc(self.trials)
        acc.add(outcome)

    def figures(self) -> dict[str, dict[str, Any]]:
        """Figures per adapter in spec order."""
        return {a: _figures(acc, self.trials, self.judge_weight) for a, acc in self.accs.items()}


def aggregate(outcomes: Iterable[dict[str, Any]], adapters: list[str], *, trials: int,
              judge_weight: float | None) -> dict[str, dict[str, Any]]:
    """Figures per adapter in spec order. ``judge_weight`` None means no judge."""
    agg = Aggregator(adapters, trials, judge_weight)
    for o in outcomes:
        agg.add(o)
    return agg.figures()


def _figures(acc: _Acc, trials: int, judge_weight: float | None) -> dict[str, Any]:
    golden = acc.passed / acc.measured if acc.measured else None
    judge_mean = acc.judge_sum / acc.judge_n if acc.judge_n else None
    if golden is None:
        overall = None
    elif judge_mean is not None and judge_weight is not None:
        overall = (1 - judge_weight) * golden + judge_weight * judge_mean
    else:
        overall = golden
    figures: dict[str, Any] = {
        "prompts": len(acc.prompts), "items": acc.items, "measured": acc.measured,
        "errors": acc.errors, "error_classes": dict(sorted(acc.error_classes.items())),
        "golden_passed": acc.passed, "golden_pass_rate": _r(golden), "judge_mean": _r(judge_mean),
        "passed": acc.ok, "pass_rate": _r(acc.ok / acc.measured) if acc.measured else None,
        "failure_modes": dict(sorted(acc.failure_modes.items())),
        "overall": _r(overall),
        "latency_ms_p50": _r(percentile(acc.latencies, 50), 3),
        "latency_ms_p95": _r(percentile(acc.latencies, 95), 3),
        "tokens_in": acc.tokens_in, "tokens_out": acc.tokens_out, "cost_usd": _r(acc.cost, 8), "cached": acc.cached,
        "judge_tokens_in": acc.judge_in, "judge_tokens_out": acc.judge_out, "judge_cost_usd": _r(acc.judge_cost, 8),
    }
    if acc.classes:  # agent items: the classes, the coverage and why the unmeasured ones are
        figures["failure_classes"] = {c: acc.classes[c] for c in failure.CLASSES if acc.classes.get(c)}
        figures["coverage"] = _r(acc.measured / acc.items) if acc.items else None
        figures["unmeasured"] = acc.unmeasured
        figures["coverage_line"] = failure.coverage_line(figures)
    if acc.mismatched:  # the agent's account of its model calls and the relay's differ: said, never hidden
        figures["trajectory_mismatches"] = acc.mismatched
        figures["trajectory_mismatch_examples"] = acc.mismatches
    if acc.trial_verdicts is not None:
        per_prompt = {p: case_verdict(v) for p, v in sorted(acc.trial_verdicts.items())}
        measured = [v for v in per_prompt.values() if v is not None]
        flaky = sorted(p for p, v in acc.trial_verdicts.items() if True in v and False in v)
        figures["pass_k"] = {"k": trials, "rate": _r(sum(measured) / len(measured)) if measured else None,
                             "measured": len(measured), "per_prompt": per_prompt, "flaky": flaky}
    return figures


_METRICS = (("golden_pass_rate", "golden_pass_rate_min"), ("judge_mean", "judge_score_min"),
            ("overall", "overall_score_min"), ("pass_rate", "pass_rate_min"))


def threshold_failures(per_adapter: dict[str, dict[str, Any]], thresholds: Thresholds) -> list[str]:
    """Each failure as ``adapter: metric value < min``; an unmeasured metric fails too, and so
    does an error rate above ``max_error_rate``."""
    failures = []
    for adapter, fig in per_adapter.items():
        limit_err = getattr(thresholds, "max_error_rate", None)
        if limit_err is not None and fig.get("items") and 0 < fig.get("measured", 0):
            rate = fig["errors"] / fig["items"]
            if rate > limit_err:
                failures.append(f"{adapter}: error_rate {rate:.4f} > max {limit_err:g} "
                                f"({fig['errors']} of {fig['items']} items errored)")
        for metric, limit_name in _METRICS:
            limit = getattr(thresholds, limit_name)
            if limit is None:
                continue
            value = fig.get(metric)
            if value is None:
                failures.append(f"{adapter}: {metric} not measured ({fig['errors']} of {fig['items']} items "
                                f"errored) < {limit:g}")
            elif value < limit:
                failures.append(f"{adapter}: {metric} {value:.4f} < {limit:g}")
    return failures


def run_cost(per_adapter: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's spend: the models under test and the judge, apart."""
    model = sum(f.get("cost_usd") or 0.0 for f in per_adapter.values())
    judge = sum(f.get("judge_cost_usd") or 0.0 for f in per_adapter.values())
    return {"model_usd": _r(model, 8), "judge_usd": _r(judge, 8), "total_usd": _r(model + judge, 8),
            "model_tokens": sum(f.get("tokens_in", 0) + f.get("tokens_out", 0) for f in per_adapter.values()),
            "judge_tokens": sum(f.get("judge_tokens_in", 0) + f.get("judge_tokens_out", 0)
                                for f in per_adapter.values())}


def nothing_measured(per_adapter: dict[str, dict[str, Any]]) -> bool:
    """True when items ran but every one errored: a configuration problem, not a quality result."""
    items = sum(f["items"] for f in per_adapter.values())
    return items > 0 and sum(f["measured"] for f in per_adapter.values()) == 0
