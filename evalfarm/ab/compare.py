"""Pure statistics for A/B comparisons: per-arm figures, paired deltas, bootstrap intervals, verdicts.

Everything here is a function of ledger rows (dicts) and fixed parameters, so a verifier
holding the rows recomputes the same numbers bit for bit:

- per arm: runs, tasks, medians of per-run tokens and USD, the USD total (``math.fsum`` in
  row order), passes and pass rate, and structured ``not_measured`` entries;
- per pair (b minus a): the delta of pass rate, median USD and median tokens, each with a
  95% percentile bootstrap interval over tasks (paired: a resample draws tasks, both arms'
  runs on those tasks come along), ``BOOTSTRAP_RESAMPLES`` resamples from
  ``random.Random(BOOTSTRAP_SEED)``;
- the verdict: quality first (pass-rate delta beyond ``QUALITY_TOLERANCE`` *and* its interval
  excludes zero). A quality *tie* needs evidence: the delta's whole interval inside the
  non-inferiority margin (``NONINFERIORITY_MARGIN``, recorded in the artifact); a wider interval
  is ``inconclusive``, with the trials per task that would be needed. Only a proven quality tie
  lets cost decide (median-USD delta beyond ``COST_TOLERANCE`` of the larger median *and* its
  interval excludes zero), otherwise ``tie``. A winner needs cost and quality measured for both
  honest arms; else ``incomparable``.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

BOOTSTRAP_SEED = 20261130
BOOTSTRAP_RESAMPLES = 1000
QUALITY_TOLERANCE = 0.02  # absolute pass-rate difference treated as equal
# a quality tie needs evidence: the pass-rate delta's whole interval within +-this margin (non-inferiority)
NONINFERIORITY_MARGIN = 0.05
COST_TOLERANCE = 0.02  # relative median-USD difference treated as equal
DIGITS = 10


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
    quality_ok = runs > 0 and all(r.get("passed") is not None for r in rows)
    not_measured: dict[str, Any] = {}
    if not tokens_ok:
        not_measured["tokens"] = _reason(rows, "input_tokens", "no_usage_reported")
    if not cost_ok:
        not_measured["cost"] = _reason(rows, "cost_usd", "price_unknown")
    if not quality_ok:
        not_measured["quality"] = _reason(rows, "passed", "not_scored")
    passes = sum(1 for r in rows if r.get("passed") is True)
    return {
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
        "pass_rate": rnd(passes / runs) if quality_ok else None,
        "not_measured": not_measured,
    }


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


def compare_arms(a: str, a_rows: list[dict[str, Any]], fa: dict[str, Any], b: str, b_rows: list[dict[str, Any]],
                 fb: dict[str, Any]) -> dict[str, Any]:
    """Deltas b minus a, each with its interval, or a structured not_measured entry."""
    deltas: dict[str, Any] = {}
    measured = {"quality": "quality_measured", "cost": "cost_measured", "tokens": "tokens_measured"}
    for name, (_, _, axis) in STATS.items():
        missing = [arm for arm, f in ((a, fa), (b, fb)) if not f[measured[axis]]]
        if missing:
            deltas[name] = {"not_measured": {"axis": axis, "arms": missing}}
            continue
        va, vb = stat(name, a_rows), stat(name, b_rows)
        lo, hi = bootstrap_delta(a_rows, b_rows, name)
        deltas[name] = {"a": rnd(va), "b": rnd(vb), "delta": rnd(vb - va),  # type: ignore[operator]
                        "ci95": [lo, hi], "ci_excludes_zero": lo > 0 or hi < 0}
    return deltas


def trials_needed(ci: list[float], delta: float, trials: int, margin: float) -> int | None:
    """Trials per task for the interval to fit inside +-margin, if the observed delta held (the
    interval narrows as 1/sqrt(trials)); None when the delta itself is at or beyond the margin."""
    room = margin - abs(delta)
    if room <= 0:
        return None
    half = (ci[1] - ci[0]) / 2
    return max(trials + 1, math.ceil(trials * (half / room) ** 2))


def verdict(a: str, fa: dict[str, Any], b: str, fb: dict[str, Any], deltas: dict[str, Any],
            margin: float | None = NONINFERIORITY_MARGIN) -> dict[str, Any]:
    """Winner, tie, inconclusive or incomparable for the honest pair (a, b). ``margin`` None is the
    rule of artifacts made before the non-inferiority margin (a quality tie without evidence)."""
    missing = [{"arm": arm, "axis": axis, **f["not_measured"][axis]}
               for arm, f in ((a, fa), (b, fb)) for axis in ("cost", "quality") if axis in f["not_measured"]]
    if missing:
        axes = sorted({m["axis"] for m in missing})
        return {"result": "incomparable", "winner": None, "decided_by": None, "not_measured": missing,
                "reason": f"{' and '.join(axes)} not measured for every honest arm; no partial winners"}
    q, c = deltas["pass_rate"], deltas["median_usd"]
    if abs(q["delta"]) > QUALITY_TOLERANCE and q["ci_excludes_zero"]:
        win = b if q["delta"] > 0 else a
        return {"result": "winner", "winner": win, "decided_by": "quality", "not_measured": [],
                "reason": f"pass rate {q['b']:.4f} vs {q['a']:.4f} (delta {q['delta']:+.4f}, "
                          f"95% CI [{q['ci95'][0]:+.4f}, {q['ci95'][1]:+.4f}])"}
    ci = q["ci95"]
    if margin is not None and not (-margin <= ci[0] and ci[1] <= margin):
        trials = max(1, round(fb["runs"] / fb["tasks"])) if fb.get("tasks") else 1
        need = trials_needed(ci, q["delta"], trials, margin)
        more = (f"about {need} trials per task (now {trials}) would be needed to show a tie" if need else
                "the observed delta is at or beyond the margin: more trials would not show a tie")
        return {"result": "inconclusive", "winner": None, "decided_by": None, "not_measured": [],
                "trials_needed": need,
                "reason": f"quality not shown equal: pass-rate delta {q['delta']:+.4f}, 95% CI [{ci[0]:+.4f}, "
                          f"{ci[1]:+.4f}] is not inside the non-inferiority margin +-{margin:g}; {more}"}
    scale = max(abs(c["a"]), abs(c["b"]))
    if scale > 0 and abs(c["delta"]) > COST_TOLERANCE * scale and c["ci_excludes_zero"]:
        win = a if c["delta"] > 0 else b
        return {"result": "winner", "winner": win, "decided_by": "cost", "not_measured": [],
                "reason": f"quality tie (pass-rate delta {q['delta']:+.4f}, 95% CI [{q['ci95'][0]:+.4f}, "
                          f"{q['ci95'][1]:+.4f}]); median cost {c['b']:.8f} vs {c['a']:.8f} USD "
                          f"(delta {c['delta']:+.8f}, 95% CI [{c['ci95'][0]:+.8f}, {c['ci95'][1]:+.8f}])"}
    return {"result": "tie", "winner": None, "decided_by": None, "not_measured": [],
            "reason": f"pass-rate delta {q['delta']:+.4f} (95% CI [{q['ci95'][0]:+.4f}, {q['ci95'][1]:+.4f}]) and "
                      f"median-cost delta {c['delta']:+.8f} USD (95% CI [{c['ci95'][0]:+.8f}, "
                      f"{c['ci95'][1]:+.8f}]) are within tolerance or their intervals include zero"}


def parameters() -> dict[str, Any]:
    """The fixed parameters, recorded in every artifact."""
    return {"bootstrap_seed": BOOTSTRAP_SEED, "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "ci": 0.95,
            "quality_tolerance": QUALITY_TOLERANCE, "cost_tolerance_relative": COST_TOLERANCE,
            "noninferiority_margin": NONINFERIORITY_MARGIN, "aggregate": "median"}
