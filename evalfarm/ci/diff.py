"""Run vs run: per-adapter deltas with a winner, and a case-level comparison.

A *case* is one (adapter, prompt id). Its verdict in a run is pass^k over its
trials: ``True`` when every trial was measured and passed, ``False`` when any
measured trial failed, ``None`` (unmeasured) when no trial failed but some
errored: a runtime error is never a quality verdict. With one trial that is
simply the item's ``passed`` field.

Shared cases (measured in both runs) are classified stable (pass -> pass),
regressed (pass -> fail), fixed (fail -> pass) or still broken (fail -> fail),
and McNemar's paired test on the discordant pairs (regressed vs fixed) says
whether the change in pass rate is statistically meaningful: the exact binomial
test below 25 discordant pairs, the continuity-corrected chi-square above.

The headline figure is the change in *pass rate* (per trial, every shared case weighing the
same) with its paired, task-clustered interval (``evalfarm.stats.paired_interval``: the case is
the unit, its trials are clustered in it; Student's t over cases and a Bonett-Price adjustment,
so one case never gives a zero-width interval), overall (a case run by several adapters is one
cluster: its difficulty is shared) and per adapter, at level 1 - alpha.
McNemar's test stays beside it: it answers a different question (did case verdicts, pass^k,
move), and a run with one trial per case gets the same answer from both.
"""
from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import Any

from ..core.verdict import item_passed
from ..runs.archive import require_complete
from ..runs.registry import DB_NAME, Registry, resolve_ref
from ..runs.report_pass import read_pass

CLASSES = ("regressed", "fixed", "still_broken", "stable")
EXACT_BELOW = 25  # discordant pairs: exact binomial below, chi-square (continuity corrected) from here


def _winner(delta: float, tolerance: float) -> str:
    """Outside the tolerance band by more than float noise (0.51 - 0.50 is a tie at 0.01)."""
    delta = round(delta, 9)
    if delta > tolerance + 1e-9:
        return "b"
    if delta < -tolerance - 1e-9:
        return "a"
    return "tie"


def diff_reports(a: dict[str, Any], b: dict[str, Any], tolerance: float = 0.01) -> dict[str, Any]:
    """Per-adapter deltas, b minus a. A figure that was not measured (the adapter is absent from a
    run, or every item of it errored there) is ``None`` (shown ``n/a``), has no delta and no winner
    ("only in a", "only in b", "unmeasured"), and stays out of the overall mean: a missing adapter or
    a configuration problem never reads as a score of 0 or a quality decline."""
    adapters = list(a["per_adapter"]) + [x for x in b["per_adapter"] if x not in a["per_adapter"]]
    rows: dict[str, dict[str, Any]] = {}
    for adapter in adapters:
        in_a, in_b = adapter in a["per_adapter"], adapter in b["per_adapter"]
        fa, fb = a["per_adapter"].get(adapter, {}), b["per_adapter"].get(adapter, {})
        oa, ob = fa.get("overall"), fb.get("overall")
        ga, gb = fa.get("golden_pass_rate"), fb.get("golden_pass_rate")
        if not in_b:
            winner = "only in a"
        elif not in_a:
            winner = "only in b"
        elif oa is None or ob is None:
            winner = "unmeasured"
        else:
            winner = _winner(ob - oa, tolerance)
        rows[adapter] = {
            "overall_a": oa, "overall_b": ob, "overall_delta": _delta(oa, ob),
            "golden_rate_a": ga, "golden_rate_b": gb, "golden_rate_delta": _delta(ga, gb),
            "in_a": in_a, "in_b": in_b, "measured": oa is not None and ob is not None, "winner": winner,
        }
    counted = [r for r in rows.values() if r["measured"]]
    mean_a = sum(r["overall_a"] for r in counted) / len(counted) if counted else None
    mean_b = sum(r["overall_b"] for r in counted) / len(counted) if counted else None
    return {"a": a.get("run_id"), "b": b.get("run_id"), "tolerance": tolerance, "per_adapter": rows,
            "overall_a": _r6(mean_a), "overall_b": _r6(mean_b), "overall_delta": _delta(mean_a, mean_b),
            "winner": _winner(mean_b - mean_a, tolerance) if counted else "unmeasured",
            "compared": len(counted)}


def _r6(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def _delta(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None else round(y - x, 6)


# --- cases -------------------------------------------------------------------------------------------
# A case's trials are kept as three counts in one int (passed, failed, errored: 20 bits each), under
# its adapter then its prompt id: about 100 bytes a case where a list of verdicts under an (adapter,
# prompt id) tuple took several hundred, so two million-case runs compare in a few hundred MB.

PASSED, FAILED, ERRORED = 1, 1 << 20, 1 << 40
_COUNT = (1 << 20) - 1


def _add(cases: dict[str, int], case: str, verdict: bool | None) -> None:
    cases[case] = cases.get(case, 0) + (PASSED if verdict is True else FAILED if verdict is False else ERRORED)


def _verdict(code: int) -> bool | None:
    """pass^k of the counted trials (core.verdict.case_verdict)."""
    if (code >> 20) & _COUNT:
        return False
    return None if code >> 40 else True


def _measured(code: int) -> tuple[int, int]:
    """(passed, measured) trials: an errored trial is no measurement."""
    passed = code & _COUNT
    return passed, passed + ((code >> 20) & _COUNT)


def case_trials(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """adapter -> prompt id -> the case's trial counts, in report order."""
    sink = CaseTrials()
    for o in report.get("outcomes") or []:
        sink.add(o, None)
    return sink.trials


class CaseTrials:
    """``case_trials`` fed one outcome at a time (a report read as a stream): ``rechecked`` takes the
    verdicts decided again, else the stored ones. The compact per-case map a comparison needs."""

    def __init__(self, rechecked: bool = False) -> None:
        self.trials: dict[str, dict[str, int]] = {}
        self.rechecked = rechecked

    def add(self, o: dict[str, Any], new: dict[str, Any] | None) -> None:
        x = new if self.rechecked else o
        cases = self.trials.get(x["adapter"])
        if cases is None:
            cases = self.trials[x["adapter"]] = {}
        _add(cases, x["prompt_id"], item_passed(x))


class _Rate:
    """The pass-rate interval's inputs, gathered case by case: each case's difference of means (8
    bytes), the trial pairs' sum and fewest, each arm's per-case means (8 bytes each)."""

    def __init__(self) -> None:
        self.d, self.mean_a, self.mean_b = array("d"), array("d"), array("d")
        self.pairs, self.fewest = 0, 0

    def add(self, passed_a: int, n_a: int, passed_b: int, n_b: int) -> None:
        if not n_a or not n_b:  # errored trials are left out, and a case without a measured trial with them
            return
        a, b = passed_a / n_a, passed_b / n_b
        self.d.append(b - a)
        self.mean_a.append(a)
        self.mean_b.append(b)
        pairs = min(n_a, n_b)
        self.pairs += pairs
        self.fewest = pairs if len(self.d) == 1 else min(self.fewest, pairs)

    def result(self, alpha: float) -> dict[str, Any]:
        """The paired, task-clustered interval of the pass-rate change (b minus a) over the cases,
        each case weighing the same (``evalfarm.stats.paired_interval``)."""
        from ..stats.paired import ADJUSTMENT, METHOD, interval_of_differences

        if not self.d:
            return {"method": METHOD, "measured": False, "cases": 0}
        iv = interval_of_differences(self.d, float(self.pairs), self.fewest,
                                     confidence=min(1.0 - alpha, 1.0 - 1e-12))  # an alpha of 1e-17 is 1.0 in floats
        lo, hi = _r6(iv.lo), _r6(iv.hi)
        n = len(self.d)
        return {"method": METHOD, "adjustment": ADJUSTMENT, "measured": True, "cases": iv.tasks,
                "confidence": _r6(1.0 - alpha), "rate_a": _r6(math.fsum(self.mean_a) / n),
                "rate_b": _r6(math.fsum(self.mean_b) / n),
                "delta": _r6(iv.delta), "ci": [lo, hi], "excludes_zero": lo > 0 or hi < 0,  # type: ignore[operator]
                "direction": "b" if lo > 0 else "a" if hi < 0 else None}  # type: ignore[operator]


def case_rates(trials: dict[str, dict[str, int]]) -> dict[tuple[str, str], float]:
    """(adapter, case) -> the pass rate over the trials measured (errored ones left out), from
    ``case_trials``; a case with no measured trial has none."""
    rates = {}
    for adapter, cases in trials.items():
        for case, code in cases.items():
            passed, measured = _measured(code)
            if measured:
                rates[(adapter, case)] = passed / measured
    return rates


def case_verdicts(report: dict[str, Any]) -> dict[tuple[str, str], bool | None]:
    """(adapter, prompt id) -> pass^k verdict over the case's trials (core.verdict.case_verdict)."""
    return {(adapter, case): _verdict(code) for adapter, cases in case_trials(report).items()
            for case, code in cases.items()}


def case_pairing(a: dict[str, Any], b: dict[str, Any]) -> dict[str, str] | None:
    """Which adapter of b each adapter of a is compared with. Shared adapter ids pair with
    themselves; two single-adapter runs with different adapters (model A vs model B on the
    same cases) pair with each other; otherwise nothing pairs."""
    ad_a, ad_b = list(a.get("per_adapter") or {}), list(b.get("per_adapter") or {})
    shared = [x for x in ad_a if x in ad_b]
    if shared:
        return {x: x for x in shared}
    if len(ad_a) == 1 and len(ad_b) == 1:
        return {ad_a[0]: ad_b[0]}
    return None


def _sig(p: float) -> float:
    return float(f"{p:.6g}")  # six significant digits: small p-values keep their precision


def mcnemar(regressed: int, fixed: int) -> dict[str, Any]:
    """McNemar's paired test on the discordant counts; two-sided p-value."""
    n = regressed + fixed
    if n == 0:
        return {"method": "none", "discordant": 0, "p_value": 1.0}
    if n < EXACT_BELOW:
        k = min(regressed, fixed)
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
        return {"method": "exact binomial", "discordant": n, "p_value": _sig(min(1.0, 2 * tail))}
    chi2 = (abs(regressed - fixed) - 1) ** 2 / n
    return {"method": "chi-square (continuity corrected)", "discordant": n, "statistic": round(chi2, 6),
            "p_value": _sig(math.erfc(math.sqrt(chi2 / 2)))}


def compare_cases(a: dict[str, Any], b: dict[str, Any], alpha: float = 0.05, trials: tuple | None = None
                  ) -> dict[str, Any]:
    """Classify the shared cases of a (before) and b (after) and test the change in pass rate.
    ``trials``: their ``case_trials``, when the reports were streamed (then a and b are their heads).
    Cases are taken adapter by adapter, each in report order."""
    ta, tb = trials if trials is not None else (case_trials(a), case_trials(b))
    pairing = case_pairing(a, b)
    paired = {x: y for x, y in (pairing or {}).items() if x in ta and y in tb}
    classes: dict[str, list[dict[str, str]]] = {c: [] for c in CLASSES}
    unmeasured: list[dict[str, str]] = []
    per_adapter: dict[str, dict[str, Any]] = {}
    rates: dict[str, _Rate] = {}
    pooled: dict[str, list[int]] = {}  # several adapters: a case is one cluster over them (its difficulty is shared)
    only_a: list[str] = []
    for adapter, cases in ta.items():
        if adapter not in paired:
            only_a += (f"{adapter}/{c}" for c in cases)
            continue
        adapter_b = paired[adapter]
        cases_b = tb[adapter_b]
        rate = rates[adapter] = _Rate()
        counts = per_adapter[adapter] = {"shared": 0, **{c: 0 for c in CLASSES}, "unmeasured": 0}
        for case, code_a in cases.items():
            code_b = cases_b.get(case)
            if code_b is None:
                only_a.append(f"{adapter}/{case}")
                continue
            measured = (*_measured(code_a), *_measured(code_b))
            rate.add(*measured)
            if len(paired) > 1:
                into = pooled.setdefault(case, [0, 0, 0, 0])
                for i, n in enumerate(measured):
                    into[i] += n
            before, after = _verdict(code_a), _verdict(code_b)
            row = {"adapter": adapter, "case": case}
            if adapter_b != adapter:
                row["adapter_b"] = adapter_b
            counts["shared"] += 1
            if before is None or after is None:
                unmeasured.append(row)
                counts["unmeasured"] += 1
                continue
            cls = ("stable" if after else "regressed") if before else ("fixed" if after else "still_broken")
            classes[cls].append(row)
            counts[cls] += 1
        if not counts["shared"]:
            del per_adapter[adapter], rates[adapter]
    measured = sum(len(v) for v in classes.values())
    for adapter, counts in per_adapter.items():
        counts["mcnemar"] = _significance(counts["regressed"], counts["fixed"], counts["shared"] - counts["unmeasured"],
                                          counts["stable"], alpha)
        counts["pass_rate"] = rates[adapter].result(alpha)
    if len(paired) > 1:
        overall = _Rate()
        for into in pooled.values():
            overall.add(*into)
        pooled.clear()
    else:
        overall = next(iter(rates.values()), _Rate())
    from_a = {y: x for x, y in paired.items()}
    only_b = [f"{x}/{c}" for x, cases in tb.items() for c in cases
              if x not in from_a or c not in ta[from_a[x]]]
    return {
        "pairing": pairing or {}, "shared": measured + len(unmeasured), "measured": measured,
        "counts": {c: len(v) for c, v in classes.items()} | {"unmeasured": len(unmeasured)},
        **classes, "unmeasured": unmeasured, "only_in_a": sorted(only_a), "only_in_b": sorted(only_b),
        "per_adapter": per_adapter,
        "mcnemar": _significance(len(classes["regressed"]), len(classes["fixed"]), measured,
                                 len(classes["stable"]), alpha),
        "pass_rate": overall.result(alpha),
        "note": None if measured + len(unmeasured) else "the runs share no cases: nothing to compare case by case",
    }


def _significance(regressed: int, fixed: int, measured: int, stable: int, alpha: float) -> dict[str, Any]:
    test = mcnemar(regressed, fixed)
    test["alpha"] = alpha
    test["significant"] = measured > 0 and test["p_value"] < alpha
    if measured:
        test["pass_rate_a"] = round((stable + regressed) / measured, 6)
        test["pass_rate_b"] = round((stable + fixed) / measured, 6)
    return test


def describe_cases(cases: dict[str, Any], limit: int = 20) -> list[str]:
    """Plain lines for a terminal: counts, the moving cases, the test."""
    if cases["note"]:
        return [cases["note"]]
    c = cases["counts"]
    lines = [f"cases: {cases['shared']} shared; {c['stable']} stable, {c['regressed']} regressed, "
             f"{c['fixed']} fixed, {c['still_broken']} still broken"
             + (f", {c['unmeasured']} unmeasured (errored)" if c["unmeasured"] else "")]
    for cls, label in (("regressed", "regressed"), ("fixed", "fixed"), ("still_broken", "still broken")):
        rows = cases[cls]
        if rows:
            names = ", ".join(f"{r['adapter']}/{r['case']}" for r in rows[:limit])
            more = f" ... and {len(rows) - limit} more" if len(rows) > limit else ""
            lines.append(f"  {label}: {names}{more}")
    p = cases.get("pass_rate") or {}
    if p.get("measured"):
        told = {"b": "b is better", "a": "b is worse", None: "no difference shown"}[p["direction"]]
        lines.append(f"pass rate per trial on {p['cases']} shared case{'' if p['cases'] == 1 else 's'} "
                     f"{p['rate_a'] * 100:.1f}% -> "
                     f"{p['rate_b'] * 100:.1f}%: delta {p['delta']:+.4f}, {p['confidence'] * 100:g}% CI "
                     f"[{p['ci'][0]:+.4f}, {p['ci'][1]:+.4f}] (paired, clustered by case): {told}")
    m = cases["mcnemar"]
    if cases["measured"] and not m["discordant"]:
        lines.append(f"pass rate on shared cases {m['pass_rate_a'] * 100:.1f}% -> {m['pass_rate_b'] * 100:.1f}%: "
                     "no case changed its verdict (McNemar p=1)")
    elif cases["measured"]:
        verdict = "statistically meaningful" if m["significant"] else "not statistically meaningful"
        lines.append(f"pass rate on shared cases {m['pass_rate_a'] * 100:.1f}% -> {m['pass_rate_b'] * 100:.1f}%: "
                     f"{verdict} (McNemar {m['method']}, {m['discordant']} discordant, p={m['p_value']:.4g}, "
                     f"alpha {m['alpha']:g})")
    if cases["only_in_a"] or cases["only_in_b"]:
        lines.append(f"not shared: {len(cases['only_in_a'])} case(s) only in a, {len(cases['only_in_b'])} only in b")
    return lines


def diff_output(a_ref: str, b_ref: str, tolerance: float, alpha: float, state_dir: Path) -> dict[str, Any]:
    """The diff JSON: per-adapter deltas (diff_reports), the case comparison, the prompts."""

    pa, pb = resolve_ref(a_ref, state_dir), resolve_ref(b_ref, state_dir)
    # each streamed once, keeping its case verdicts only (an edited report is exit 2: runs.trust)
    ra, rb = read_pass(pa, state_dir, "diff", CaseTrials), read_pass(pb, state_dir, "diff", CaseTrials)
    ta, tb = ra.trusted, rb.trusted
    a, b = require_complete(ta.report, str(pa)), require_complete(tb.report, str(pb))
    result = diff_reports(a, b, tolerance)
    result["notes"] = ta.notes + [n for n in tb.notes if n not in ta.notes]
    result["cases"] = compare_cases(a, b, alpha, (ra.sink.trials, rb.sink.trials))
    prompts = {"a": None, "b": None, "changed_under_same_version": False}
    if (Path(state_dir) / DB_NAME).is_file():
        reg = Registry(state_dir)
        for side, rep in (("a", a), ("b", b)):
            entry = reg.get(rep.get("run_id", ""))
            prompts[side] = entry["prompt"] if entry else None
        pa, pb = prompts["a"], prompts["b"]
        if pa and pb and (pa["name"], pa["version"]) == (pb["name"], pb["version"]) and pa["hash"] != pb["hash"]:
            prompts["changed_under_same_version"] = True
    result["prompts"] = prompts
    return result


def diff_text(result: dict[str, Any]) -> list[str]:

    lines = describe_cases(result["cases"])
    p = result.get("prompts") or {}
    pa, pb = p.get("a"), p.get("b")
    if pa or pb:
        show = lambda x: f"{x['name']}@{x['version']} ({x['hash'][:19]})" if x else "none"  # noqa: E731
        lines.append(f"prompt: a {show(pa)}, b {show(pb)}")
    if p.get("changed_under_same_version"):
        lines.append("WARNING: same prompt version, different content: these runs used different prompts")
    return lines
