"""Case-level diff: classification (pass^k with trials), McNemar's test, pairing, no shared cases."""
from __future__ import annotations

import math

import pytest

from evalfarm.ci.diff import case_verdicts, compare_cases, describe_cases, mcnemar


def outcome(adapter: str, case: str, passed: bool | None, trial: int = 0) -> dict:
    return {"adapter": adapter, "prompt_id": case, "trial": trial, "passed": passed,
            "golden_passed": passed, "error": {"class": "ConnectionError"} if passed is None else None}


def report(run_id: str, rows: list[tuple[str, str, list[bool | None]]]) -> dict:
    outcomes, per_adapter = [], {}
    for adapter, case, trials in rows:
        per_adapter.setdefault(adapter, {"overall": 0.0, "golden_pass_rate": 0.0})
        outcomes += [outcome(adapter, case, v, t) for t, v in enumerate(trials)]
    return {"run_id": run_id, "per_adapter": per_adapter, "outcomes": outcomes}


def test_four_classes_and_unmeasured():
    a = report("A", [("m", "stable", [True]), ("m", "regressed", [True]), ("m", "fixed", [False]),
                     ("m", "broken", [False]), ("m", "err", [True]), ("m", "gone", [True])])
    b = report("B", [("m", "stable", [True]), ("m", "regressed", [False]), ("m", "fixed", [True]),
                     ("m", "broken", [False]), ("m", "err", [None]), ("m", "new", [False])])
    c = compare_cases(a, b)
    names = {cls: [r["case"] for r in c[cls]] for cls in ("stable", "regressed", "fixed", "still_broken")}
    assert names == {"stable": ["stable"], "regressed": ["regressed"], "fixed": ["fixed"], "still_broken": ["broken"]}
    assert [r["case"] for r in c["unmeasured"]] == ["err"]  # an error is never a regression
    assert c["only_in_a"] == ["m/gone"] and c["only_in_b"] == ["m/new"]
    assert c["shared"] == 5 and c["measured"] == 4
    assert c["mcnemar"]["pass_rate_a"] == 0.5 and c["mcnemar"]["pass_rate_b"] == 0.5
    assert c["per_adapter"]["m"]["regressed"] == 1


def test_pass_k_verdicts_with_trials():
    r = report("A", [("m", "all", [True, True, True]), ("m", "flaky", [True, False, True]),
                     ("m", "one_error", [True, None, True]), ("m", "error_and_fail", [None, False, True]),
                     ("m", "all_errors", [None, None, None])])
    assert case_verdicts(r) == {("m", "all"): True, ("m", "flaky"): False, ("m", "one_error"): None,
                                ("m", "error_and_fail"): False, ("m", "all_errors"): None}
    before = report("A", [("m", "x", [True, True, True])])
    after = report("B", [("m", "x", [True, False, True])])  # one flaky trial breaks pass^3
    assert compare_cases(before, after)["counts"]["regressed"] == 1


def test_older_reports_without_passed_use_golden_passed():
    r = {"run_id": "A", "per_adapter": {"m": {}}, "outcomes": [
        {"adapter": "m", "prompt_id": "x", "trial": 0, "golden_passed": True, "error": None}]}
    assert case_verdicts(r) == {("m", "x"): True}


def test_mcnemar_exact_and_chi_square():
    assert mcnemar(0, 0)["p_value"] == 1.0
    assert mcnemar(3, 3)["p_value"] == 1.0
    exact = mcnemar(0, 6)  # two-sided exact binomial: 2 * (1/2)^6
    assert exact["method"] == "exact binomial" and exact["p_value"] == pytest.approx(2 / 64)
    assert mcnemar(1, 8)["p_value"] == pytest.approx(2 * (1 + 9) / 2 ** 9, abs=1e-6)  # 0.0390625
    big = mcnemar(30, 10)  # chi2 = (|30-10|-1)^2 / 40 = 9.025
    assert big["method"].startswith("chi-square") and big["statistic"] == pytest.approx(9.025)
    assert big["p_value"] == pytest.approx(math.erfc(math.sqrt(9.025 / 2)), abs=1e-6)
    assert 0.002 < big["p_value"] < 0.003


def test_significance_on_shared_cases():
    rows_a = [("m", f"c{i}", [True]) for i in range(10)]
    rows_b = [("m", f"c{i}", [i >= 8]) for i in range(10)]  # 8 regressions, no fixes
    c = compare_cases(report("A", rows_a), report("B", rows_b))
    assert c["mcnemar"]["significant"] and c["mcnemar"]["p_value"] == pytest.approx(2 / 256)
    lines = describe_cases(c)
    assert "8 regressed" in lines[0] and any("statistically meaningful (McNemar exact binomial" in x for x in lines)
    one = compare_cases(report("A", rows_a[:2]), report("B", [("m", "c0", [False]), ("m", "c1", [True])]))
    assert not one["mcnemar"]["significant"] and one["mcnemar"]["p_value"] == 1.0


def test_single_adapter_runs_pair_across_models_and_disjoint_runs_say_so():
    a = report("A", [("model-x", "q1", [True]), ("model-x", "q2", [True])])
    b = report("B", [("model-y", "q1", [False]), ("model-y", "q2", [True])])
    c = compare_cases(a, b)
    assert c["pairing"] == {"model-x": "model-y"}
    assert c["regressed"] == [{"adapter": "model-x", "case": "q1", "adapter_b": "model-y"}]
    none = compare_cases(a, report("C", [("model-y", "other", [True])]))
    assert none["shared"] == 0 and none["note"] == "the runs share no cases: nothing to compare case by case"
    assert describe_cases(none) == [none["note"]]
    multi = compare_cases(report("A", [("x", "q", [True]), ("y", "q", [True])]),
                          report("B", [("z", "q", [True]), ("w", "q", [True])]))
    assert multi["shared"] == 0 and multi["note"]


def test_the_pass_rate_change_has_a_paired_case_clustered_interval():
    """Issue 20: the default interval in diff is the paired, task-clustered one, and it says so."""
    rows_a = [("m", f"c{i}", [True, True]) for i in range(30)]
    rows_b = [("m", f"c{i}", [i >= 12, i >= 12]) for i in range(30)]  # 12 of 30 cases now fail both trials
    c = compare_cases(report("A", rows_a), report("B", rows_b))
    p = c["pass_rate"]
    assert p["method"] == "paired-task-clustered" and p["cases"] == 30 and p["confidence"] == 0.95
    assert p["delta"] == -0.4 and p["ci"][1] < 0 and p["direction"] == "a" and p["excludes_zero"]
    assert c["per_adapter"]["m"]["pass_rate"]["ci"] == p["ci"]
    assert any("delta -0.4000" in line and "(paired, clustered by case): b is worse" in line for line in describe_cases(c))
    # one shared case that passes on both sides: an interval of [-1, 1], never [0, 0]
    one = compare_cases(report("A", [("m", "x", [True])]), report("B", [("m", "x", [True])]))
    assert one["pass_rate"]["ci"] == [-1.0, 1.0] and one["pass_rate"]["direction"] is None
    assert any("no difference shown" in line for line in describe_cases(one))
    # errored trials are left out; a case with no measured trial on one side drops out
    mixed = compare_cases(report("A", [("m", "x", [True, None]), ("m", "y", [None]), ("m", "z", [False])]),
                          report("B", [("m", "x", [False, True]), ("m", "y", [True]), ("m", "z", [True])]))
    assert mixed["pass_rate"]["cases"] == 2 and mixed["pass_rate"]["rate_a"] == 0.5
    none = compare_cases(report("A", [("m", "y", [None])]), report("B", [("m", "y", [True])]))
    assert none["pass_rate"] == {"method": "paired-task-clustered", "measured": False, "cases": 0}


def test_a_case_run_by_two_adapters_is_one_cluster():
    """Two adapters on the same cases: the overall interval counts cases, not (adapter, case) pairs."""
    rows = lambda passed: [(ad, f"c{i}", [passed(i)]) for ad in ("x", "y") for i in range(10)]  # noqa: E731
    c = compare_cases(report("A", rows(lambda i: True)), report("B", rows(lambda i: i >= 3)))
    assert c["pass_rate"]["cases"] == 10 and c["per_adapter"]["x"]["pass_rate"]["cases"] == 10
    from evalfarm.stats import paired_interval
    as_if_independent = paired_interval({(ad, i): [1.0] for ad in "xy" for i in range(10)},
                                        {(ad, i): [float(i >= 3)] for ad in "xy" for i in range(10)})
    lo, hi = c["pass_rate"]["ci"]
    assert hi - lo > as_if_independent.hi - as_if_independent.lo  # the same evidence is not counted twice
