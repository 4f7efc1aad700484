"""Pure statistics for A/B comparisons: per-arm figures, paired deltas and their intervals, verdicts.

Everything here is a function of ledger rows (dicts) and fixed parameters, so a verifier
holding the rows recomputes the same numbers bit for bit:

- per arm: runs, tasks, medians of per-run tokens and USD, the USD total (``math.fsum`` in
  row order), passes and pass rate, and structured ``not_measured`` entries;
- per pair (b minus a): the delta of pass rate, median USD and median tokens, each with a 95%
  interval that treats the task as the unit (both arms ran the same tasks): for the pass rate
  the paired, task-clustered interval of ``evalfarm.stats`` (Miller 2024, with Student's t over
  tasks and a Bonett-Price adjustment, so one task or unanimous tasks never give a zero-width
  interval); for the medians a percentile bootstrap over tasks (a resample draws tasks, both
  arms' runs on them come along), ``BOOTSTRAP_RESAMPLES`` resamples from
  ``random.Random(BOOTSTRAP_SEED)``, and no interval at all from a single task;
- the verdict: quality first (pass-rate delta beyond ``QUALITY_TOLERANCE`` *and* its interval
  excludes zero). A quality *tie* needs evidence: the delta's whole interval inside the
  non-inferiority margin (``NONINFERIORITY_MARGIN``, recorded in the artifact); a wider interval
  is ``inconclusive``, with the trials per task (or the tasks) that would be needed. Only a proven
  quality tie lets cost decide (median-USD delta beyond ``COST_TOLERANCE`` of the larger median
  *and* its interval excludes zero), otherwise ``tie``. A winner needs cost and quality measured
  for both honest arms; else ``incomparable``.

The artifact's ``parameters`` name the methods (``quality_interval``, ``median_interval``).
Artifacts made before them (no ``quality_interval``) used a bootstrap for the pass rate too, and
are rebuilt by that rule (``legacy``), so they still verify.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

from ..core import failure

BOOTSTRAP_SEED = 20261130
BOOTSTRAP_RESAMPLES = 1000
QUALITY_TOLERANCE = 0.02  # absolute pass-rate difference treated as equal
# a quality tie needs evidence: the pass-rate delta's whole interval within +-this margin (non-inferiority)
NONINFERIORITY_MARGIN = 0.05
COST_TOLERANCE = 0.02  # relative median-USD difference treated as equal
DIGITS = 10
QUALITY_INTERVAL = "paired-task-clustered"  # evalfarm.stats.paired.METHOD
MEDIAN_INTERVAL = "task-cluster-bootstrap"
COVERAGE_MARGIN = failure.COVERAGE_MARGIN  # arms whose coverage differs by more name no winner


def measured_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows the pass rate counts: an agent run that failed for infrastructure or whose check could not
    run (``failure_class``, core/failure.py) is unmeasured, out of the denominator."""
    return [r for r in rows if r.get("failure_class") not in failure.UNMEASURED]


def rnd(x: float | None) -> float | None:
    return None if x is None else round(float(x), DIGITS) + 0.0  # +0.0: never "-0.0"


def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def _tokens(row: dict[str, Any]) -> int | None:
    if row.get("input_tokens") is None or row.get("output_tokens") is None:
        return None
    return int(row["input_tokens"]) + int(row["output_tokens"])


def _reason(rows: list[dict[str, Any]], field: str, unmeasured_reason: str) -> dict[str, Any]:
    missing = [r for r in rows if r.get(field) is None]
    errored = sum(1 for r in missing if r.get("error"))
    reason = "no_runs" if not rows else ("runtime_error" if errored else unmeasured_reason)
    return {"reason": reason, "runs_missing": len(missing) if rows else 0, "runs_errored": errored}


def arm_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate one arm's ledger rows (in artifact order)."""
    runs = len(rows)
    tokens = [_tokens(r) for r in rows]
    tokens_ok = runs > 0 and all(t is not None for t in tokens)
    cost_ok = runs > 0 and all(r.get("cost_usd") is not None for r in rows)
    scored = measured_rows(rows)
    quality_ok = bool(scored) and all(r.get("passed") is not None for r in scored)
    not_measured: dict[str, Any] = {}
    if not tokens_ok:
        not_measured["tokens"] = _reason(rows, "input_tokens", "no_usage_reported")
    if not cost_ok:
        not_measured["cost"] = _reason(rows, "cost_usd", "price_unknown")
    if not quality_ok:
        not_measured["quality"] = _reason(scored or rows, "passed", "not_scored")
    passes = sum(1 for r in scored if r.get("passed") is True)
    figures = {
        "runs": runs,
        "tasks": len({r["task"] for r in rows}),
        "tokens_measured": tokens_ok,
        "cost_measured": cost_ok,
        "quality_measured": quality_ok,
        "median_tokens": rnd(median([t for t in tokens if t is not None])) if tokens_ok else None,
        "median_output_tokens": rnd(median([r["output_tokens"] for r in rows])) if tokens_ok else None,
        "median_usd": rnd(median([r["cost_usd"] for r in rows])) if cost_ok else None,
        "total_usd": rnd(math.fsum(r["cost_usd"] for r in rows)) if cost_ok else None,
        "passes": passes if quality_ok else None,
        "pass_rate": rnd(passes / len(scored)) if quality_ok else None,
        "not_measured": not_measured,
    }
    if len(scored) < runs:  # agent runs left out of the pass rate: coverage beside the score
        figures["coverage"] = rnd(len(scored) / runs)
        figures["unmeasured_runs"] = {c: sum(1 for r in rows if r.get("failure_class") == c)
                                      for c in failure.UNMEASURED if any(r.get("failure_class") == c for r in rows)}
    if any("agent" in r for r in rows):  # spawn arms: coding agents in worktrees
        figures.update(agent_figures(rows))
    return figures


def agent_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A spawn arm's agents (name and version), the models they used, and the medians of turns,
    tool calls and diff size over its measured runs (None when no run was measured)."""
    def med(field: str) -> float | None:
        values = [r[field] for r in rows if isinstance(r.get(field), (int, float)) and not isinstance(r[field], bool)]
        return rnd(median(values)) if values else None

    return {"agents": sorted({f"{r['agent']} {r.get('agent_version') or '?'}" for r in rows if r.get("agent")}),
            "models_used": sorted({m for r in rows for m in (r.get("models") or []) if isinstance(m, str)}),
            "median_turns": med("turns"), "median_tool_calls": med("tool_calls"),
            "median_diff_lines": med("diff_lines"), "median_diff_files": med("diff_files")}


def _passed(row: dict[str, Any]) -> float:
    return 1.0 if row.get("passed") is True else 0.0


# name -> (per-run value, reducer, axis)
STATS: dict[str, tuple[Callable[[dict[str, Any]], Any], str, str]] = {
    "pass_rate": (_passed, "mean", "quality"),
    "median_usd": (lambda r: r["cost_usd"], "median", "cost"),
    "median_tokens": (_tokens, "median", "tokens"),
}


def stat(name: str, rows: list[dict[str, Any]]) -> float:
    value, reducer, _ = STATS[name]
    values = [value(r) for r in rows]
    return sum(values) / len(values) if reducer == "mean" else median(values)  # type: ignore[return-value]


def bootstrap_delta(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], name: str,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95% percentile interval of stat(b) - stat(a), resampling tasks with both arms paired."""
    value, reducer, _ = STATS[name]
    a_by: dict[str, list[Any]] = {}
    b_by: dict[str, list[Any]] = {}
    for rows, by in ((a_rows, a_by), (b_rows, b_by)):
        for r in rows:
            by.setdefault(r["task"], []).append(value(r))
    tasks = [t for t in a_by if t in b_by]
    rng = random.Random(seed)
    n = len(tasks)
    if reducer == "mean":  # per-task sums and counts: a resample is a few additions
        sa = [(sum(a_by[t]), len(a_by[t])) for t in tasks]
        sb = [(sum(b_by[t]), len(b_by[t])) for t in tasks]

        def one(pick: list[int]) -> float:
            return (sum(sb[i][0] for i in pick) / sum(sb[i][1] for i in pick)
                    - sum(sa[i][0] for i in pick) / sum(sa[i][1] for i in pick))
    else:
        la, lb = [a_by[t] for t in tasks], [b_by[t] for t in tasks]

        def one(pick: list[int]) -> float:
            return median([v for i in pick for v in lb[i]]) - median([v for i in pick for v in la[i]])  # type: ignore[operator]
    deltas = sorted(one([rng.randrange(n) for _ in range(n)]) for _ in range(resamples))
    lo = deltas[math.floor(0.025 * (resamples - 1))]
    hi = deltas[math.ceil(0.975 * (resamples - 1))]
    return rnd(lo), rnd(hi)  # type: ignore[return-value]


def by_task(rows: list[dict[str, Any]], name: str = "pass_rate") -> dict[str, list[Any]]:
    """Each task's per-run values of a statistic, in row order."""
    value = STATS[name][0]
    out: dict[str, list[Any]] = {}
    for r in rows:
        out.setdefault(r["task"], []).append(value(r))
    return out


def quality_interval(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]]):
    """The paired, task-clustered 95% interval of pass rate b minus a (``evalfarm.stats``)."""
    from ..stats.paired import paired_interval

    return paired_interval(by_task(a_rows), by_task(b_rows))


def _interval(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], name: str,
              legacy: bool) -> dict[str, Any]:
    if legacy:  # an artifact made before the paired interval: rebuilt by its own rule
        lo, hi = bootstrap_delta(a_rows, b_rows, name)
        return {"ci95": [lo, hi], "ci_excludes_zero": lo > 0 or hi < 0}
    if STATS[name][1] == "mean":
        iv = quality_interval(a_rows, b_rows)
        lo, hi = rnd(iv.lo), rnd(iv.hi)
        return {"ci95": [lo, hi], "ci_excludes_zero": lo > 0 or hi < 0, "method": QUALITY_INTERVAL,
                "se": rnd(iv.se), "tasks": iv.tasks}
    tasks = len(set(by_task(a_rows, name)) & set(by_task(b_rows, name)))
    if tasks < 2:  # every resample of one task is that task: an "interval" of one point
        return {"ci95": None, "ci_excludes_zero": False, "method": MEDIAN_INTERVAL, "tasks": tasks}
    lo, hi = bootstrap_delta(a_rows, b_rows, name)
    return {"ci95": [lo, hi], "ci_excludes_zero": lo > 0 or hi < 0, "method": MEDIAN_INTERVAL, "tasks": tasks}


def compare_arms(a: str, a_rows: list[dict[str, Any]], fa: dict[str, Any], b: str, b_rows: list[dict[str, Any]],
                 fb: dict[str, Any], legacy: bool = False) -> dict[str, Any]:
    """Deltas b minus a, each with its interval, or a structured not_measured entry."""
    deltas: dict[str, Any] = {}
    measured = {"quality": "quality_measured", "cost": "cost_measured", "tokens": "tokens_measured"}
    for name, (_, _, axis) in STATS.items():
        missing = [arm for arm, f in ((a, fa), (b, fb)) if not f[measured[axis]]]
        if missing:
            deltas[name] = {"not_measured": {"axis": axis, "arms": missing}}
            continue
        ra, rb = (measured_rows(a_rows), measured_rows(b_rows)) if axis == "quality" else (a_rows, b_rows)
        va, vb = stat(name, ra), stat(name, rb)
        deltas[name] = {"a": rnd(va), "b": rnd(vb), "delta": rnd(vb - va),  # type: ignore[operator]
                        **_interval(ra, rb, name, legacy)}
    return deltas


def needed_for_tie(a_rows: list[dict[str, Any]], b_rows: list[dict[str, Any]], delta: float,
                   margin: float, vary_trials: bool = True) -> dict[str, Any]:
    """How much more data the pass-rate interval would need to fit inside +-margin if the observed
    delta and variance held: trials per task (same tasks; unless ``vary_trials`` is False), else
    tasks (same trials); None where no amount would do. ``lower_bound``: one trial per task, so
    task-to-task variation could not be told from trial noise and the trial count is a minimum.
    When the delta is at or beyond the margin no tie can be shown; ``trials_to_detect`` is then the
    trials per task at which the observed delta, if real, would be detected at 80% power."""
    from ..stats.power import half_width, observed_variance, power, smallest

    a_by, b_by = by_task(a_rows), by_task(b_rows)
    tasks = len(set(a_by) & set(b_by))
    trials = min(min(len(a_by[t]), len(b_by[t])) for t in a_by if t in b_by) if tasks else 1
    out: dict[str, Any] = {"trials_needed": None, "tasks_needed": None, "lower_bound": False}
    if not tasks:
        return out
    variance = observed_variance(a_by, b_by)  # from fewer than 2 tasks: the worst case for pass/fail
    out["lower_bound"] = not variance.separated
    out["variance"] = variance.source
    if abs(delta) >= margin:  # no tie to show; a winner, if the difference is real and trials can show it
        if tasks >= 2 and vary_trials and delta != 0:
            out["trials_to_detect"] = smallest(
                lambda k: power(tasks, k, variance=variance).mdd <= abs(delta), start=trials + 1, limit=100_000)
        return out

    def fits(n: int, k: int) -> bool:
        return abs(delta) * n / (n + 2.0 / k) + half_width(n, k, variance) <= margin

    if tasks >= 2 and vary_trials:
        out["trials_needed"] = smallest(lambda k: fits(tasks, k), start=trials + 1, limit=100_000)
    if out["trials_needed"] is None:
        out["tasks_needed"] = smallest(lambda n: fits(n, trials), start=max(2, tasks + 1), limit=1_000_000)
    return out


def more_data(need: dict[str, Any], trials: int, tasks: int, unit: str = "trials per task") -> str:
    """The inconclusive verdict's advice, in words."""
    if need["trials_needed"] is not None:
        least = "at least " if need["lower_bound"] else "about "
        return f"{least}{need['trials_needed']} {unit} (now {trials}) would be needed to show a tie"
    if need["tasks_needed"] is not None:
        what = f"more trials per task cannot show a tie with {tasks} tasks; " if tasks >= 2 else ""
        worst = " (at the worst-case variance: one task shows none)" if need.get("variance") == "assumed" else ""
        return f"{what}about {need['tasks_needed']} tasks would be needed to show a tie{worst}"
    detect = need.get("trials_to_detect")
    more = (f"; if it is real, about {detect} trials per task (now {trials}) would show it at 80% power"
            if detect else "")
    return f"the observed delta is at or beyond the margin: more trials would not show a tie{more}"


def trials_needed(ci: list[float], delta: float, trials: int, margin: float) -> int | None:
    """Trials per task for the interval to fit inside +-margin, if the observed delta held (the
    interval narrows as 1/sqrt(trials)); None when the delta itself is at or beyond the margin."""
    room = margin - abs(delta)
    if room <= 0:
        return None
    half = (ci[1] - ci[0]) / 2
    return max(trials + 1, math.ceil(trials * (half / room) ** 2))


def _ci(ci: list[float] | None) -> str:
    return "no interval from one task" if ci is None else f"95% CI [{ci[0]:+.8f}, {ci[1]:+.8f}]"


def verdict(a: str, fa: dict[str, Any], b: str, fb: dict[str, Any], deltas: dict[str, Any],
            margin: float | None = NONINFERIORITY_MARGIN,
            rows: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Winner, tie, inconclusive or incomparable for the honest pair (a, b). ``margin`` None is the
    rule of artifacts made before the non-inferiority margin (a quality tie without evidence).
    ``rows`` (a's and b's): the advice of an inconclusive verdict comes from their variance;
    without them (artifacts made before the paired interval) from the interval's width."""
    missing = [{"arm": arm, "axis": axis, **f["not_measured"][axis]}
               for arm, f in ((a, fa), (b, fb)) for axis in ("cost", "quality") if axis in f["not_measured"]]
    if missing:
        axes = sorted({m["axis"] for m in missing})
        return {"result": "incomparable", "winner": None, "decided_by": None, "not_measured": missing,
                "reason": f"{' and '.join(axes)} not measured for every honest arm; no partial winners"}
    ca, cb = fa.get("coverage", 1.0), fb.get("coverage", 1.0)
    if abs(ca - cb) > COVERAGE_MARGIN:
        return {"result": "incomparable", "winner": None, "decided_by": None, "not_measured": [],
                "reason": f"coverage differs: {a} measured {ca:.0%} of its runs, {b} {cb:.0%} (more than "
                          f"{COVERAGE_MARGIN:.0%} apart; the rest failed for infrastructure or their check could "
                          "not run); no winner"}
    q, c = deltas["pass_rate"], deltas["median_usd"]
    if abs(q["delta"]) > QUALITY_TOLERANCE and q["ci_excludes_zero"]:
        win = b if q["delta"] > 0 else a
        return {"result": "winner", "winner": win, "decided_by": "quality", "not_measured": [],
                "reason": f"pass rate {q['b']:.4f} vs {q['a']:.4f} (delta {q['delta']:+.4f}, "
                          f"95% CI [{q['ci95'][0]:+.4f}, {q['ci95'][1]:+.4f}])"}
    ci = q["ci95"]
    if margin is not None and not (-margin <= ci[0] and ci[1] <= margin):
        trials = max(1, round(fb["runs"] / fb["tasks"])) if fb.get("tasks") else 1
        if rows is None:
            need = trials_needed(ci, q["delta"], trials, margin)
            more = (f"about {need} trials per task (now {trials}) would be needed to show a tie" if need else
                    "the observed delta is at or beyond the margin: more trials would not show a tie")
            extra: dict[str, Any] = {"trials_needed": need}
        else:
            extra = needed_for_tie(rows[0], rows[1], q["delta"], margin)
            more = more_data(extra, trials, fb.get("tasks") or 0)
        return {"result": "inconclusive", "winner": None, "decided_by": None, "not_measured": [], **extra,
                "reason": f"quality not shown equal: pass-rate delta {q['delta']:+.4f}, 95% CI [{ci[0]:+.4f}, "
                          f"{ci[1]:+.4f}] is not inside the non-inferiority margin +-{margin:g}; {more}"}
    scale = max(abs(c["a"]), abs(c["b"]))
    if scale > 0 and abs(c["delta"]) > COST_TOLERANCE * scale and c["ci_excludes_zero"]:
        win = a if c["delta"] > 0 else b
        return {"result": "winner", "winner": win, "decided_by": "cost", "not_measured": [],
                "reason": f"quality tie (pass-rate delta {q['delta']:+.4f}, 95% CI [{q['ci95'][0]:+.4f}, "
                          f"{q['ci95'][1]:+.4f}]); median cost {c['b']:.8f} vs {c['a']:.8f} USD "
                          f"(delta {c['delta']:+.8f}, {_ci(c['ci95'])})"}
    return {"result": "tie", "winner": None, "decided_by": None, "not_measured": [],
            "reason": f"pass-rate delta {q['delta']:+.4f} (95% CI [{q['ci95'][0]:+.4f}, {q['ci95'][1]:+.4f}]) and "
                      f"median-cost delta {c['delta']:+.8f} USD ({_ci(c['ci95'])}) are within tolerance or their "
                      "intervals include zero"}


def parameters() -> dict[str, Any]:
    """The fixed parameters, recorded in every artifact: the methods, by name, among them."""
    return {"bootstrap_seed": BOOTSTRAP_SEED, "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "ci": 0.95,
            "quality_tolerance": QUALITY_TOLERANCE, "cost_tolerance_relative": COST_TOLERANCE,
            "noninferiority_margin": NONINFERIORITY_MARGIN, "aggregate": "median",
            "quality_interval": QUALITY_INTERVAL, "median_interval": MEDIAN_INTERVAL}


def is_legacy(params: dict[str, Any]) -> bool:
    """Parameters of an artifact made before the paired interval (a bootstrap for the pass rate too)."""
    return "quality_interval" not in params
