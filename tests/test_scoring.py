"""The pure core: golden checks, aggregation, pass^k, thresholds, diff."""
from __future__ import annotations

import pytest

from evalfarm.core.aggregate import aggregate, nothing_measured, percentile, threshold_failures
from evalfarm.core.checks import golden_check
from evalfarm.ci.diff import diff_reports
from evalfarm.engine.judges import clamp01
from evalfarm.spec.models import PromptSpec, Thresholds


def P(**kw) -> PromptSpec:
    return PromptSpec(id=kw.pop("id", "p"), text=kw.pop("text", "t"), **kw)


def test_golden_check_substrings_and_regex():
    p = P(expected_output_contains=["hello", "world"], expected_output_regex=r"^hello")
    assert golden_check(p, "hello world") == (True, "all assertions passed")
    ok, why = golden_check(p, "hello there")
    assert not ok and why == "missing expected substring 'world'"
    ok, why = golden_check(p, "say hello world")
    assert not ok and "regex '^hello' did not match" in why
    assert golden_check(P(), "anything") == (True, "no assertions")
    # re.search, not re.match
    assert golden_check(P(expected_output_regex=r"\d+"), "abc 42")[0]


def test_clamp():
    assert clamp01(1.7) == 1.0 and clamp01(-2) == 0.0 and clamp01(float("nan")) == 0.0 and clamp01(0.25) == 0.25


def test_percentile():
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)


def o(adapter, prompt, trial=0, passed=True, judge=None, error=None, latency=10.0):
    return {"key": f"{adapter}-{prompt}-{trial}", "adapter": adapter, "prompt_id": prompt, "trial": trial,
            "golden_passed": None if error else passed, "judge_score": judge, "latency_ms": latency,
            "error": error, "cost_usd": 0.001, "input_tokens": 3, "output_tokens": 5}


def test_aggregate_overall_blends_judge():
    outs = [o("a", "p1", judge=1.0), o("a", "p2", passed=False, judge=0.5)]
    fig = aggregate(outs, ["a"], trials=1, judge_weight=0.4)["a"]
    assert fig["golden_pass_rate"] == 0.5
    assert fig["judge_mean"] == 0.75
    assert fig["overall"] == pytest.approx(0.6 * 0.5 + 0.4 * 0.75)
    assert fig["prompts"] == 2 and fig["items"] == 2 and "pass_k" not in fig
    no_judge = aggregate(outs, ["a"], trials=1, judge_weight=None)["a"]
    assert no_judge["overall"] == 0.5


def test_errors_are_not_quality_failures():
    outs = [o("a", "p1"), o("a", "p2", error={"class": "ConnectionError"})]
    fig = aggregate(outs, ["a"], trials=1, judge_weight=None)["a"]
    assert fig["golden_pass_rate"] == 1.0 and fig["errors"] == 1 and fig["measured"] == 1
    assert fig["error_classes"] == {"ConnectionError": 1}
    assert not nothing_measured({"a": fig})
    all_err = aggregate([o("a", "p1", error={"class": "X"})], ["a"], trials=1, judge_weight=None)
    assert nothing_measured(all_err) and all_err["a"]["golden_pass_rate"] is None


def test_pass_k_and_flaky():
    outs = [o("a", "p1", 0), o("a", "p1", 1), o("a", "p2", 0), o("a", "p2", 1, passed=False),
            o("a", "p3", 0, passed=False), o("a", "p3", 1, passed=False)]
    pk = aggregate(outs, ["a"], trials=2, judge_weight=None)["a"]["pass_k"]
    assert pk["per_prompt"] == {"p1": True, "p2": False, "p3": False}
    assert pk["flaky"] == ["p2"] and pk["rate"] == pytest.approx(1 / 3) and pk["k"] == 2


def test_latency_percentiles_and_cost():
    outs = [o("a", f"p{i}", latency=float(i)) for i in range(1, 101)]
    fig = aggregate(outs, ["a"], trials=1, judge_weight=None)["a"]
    assert fig["latency_ms_p50"] == 50.5 and fig["latency_ms_p95"] == pytest.approx(95.05)
    assert fig["cost_usd"] == pytest.approx(0.1) and fig["tokens_in"] == 300


def test_threshold_failures_format():
    per = {"a": {"golden_pass_rate": 0.5, "judge_mean": 0.9, "overall": 0.6, "items": 2, "errors": 0},
           "b": {"golden_pass_rate": None, "judge_mean": None, "overall": None, "items": 2, "errors": 2}}
    fails = threshold_failures(per, Thresholds(golden_pass_rate_min=0.8, judge_score_min=0.7))
    assert fails[0] == "a: golden_pass_rate 0.5000 < 0.8"
    assert fails[1].startswith("b: golden_pass_rate not measured (2 of 2 items errored)")
    assert len(fails) == 3
    assert threshold_failures(per, Thresholds()) == []  # b: all errored is "nothing measured", exit 3


def test_pass_rate_min_uses_the_full_verdict():
    fig = {"items": 4, "measured": 4, "errors": 0, "golden_pass_rate": 1.0, "judge_mean": 0.4, "overall": 0.7,
           "pass_rate": 0.5}
    assert threshold_failures({"a": fig}, Thresholds(pass_rate_min=0.75)) == ["a: pass_rate 0.5000 < 0.75"]


def test_error_rate_above_max_fails_even_when_the_rest_passes():
    fig = {"items": 1000, "measured": 1, "errors": 999, "golden_pass_rate": 1.0, "judge_mean": None,
           "overall": 1.0}
    assert threshold_failures({"a": fig}, Thresholds()) == \
        ["a: error_rate 0.9990 > max 0.5 (999 of 1000 items errored)"]
    assert threshold_failures({"a": fig}, Thresholds(max_error_rate=None)) == []
    assert threshold_failures({"a": dict(fig, errors=10, measured=990)}, Thresholds()) == []


def test_diff_winner_and_missing_adapter():
    a = {"run_id": "A", "per_adapter": {"x": {"overall": 0.5, "golden_pass_rate": 0.5},
                                         "y": {"overall": 0.9, "golden_pass_rate": 0.9}}}
    b = {"run_id": "B", "per_adapter": {"x": {"overall": 0.8, "golden_pass_rate": 0.7},
                                         "z": {"overall": 0.1, "golden_pass_rate": 0.1}}}
    d = diff_reports(a, b, tolerance=0.01)
    assert d["per_adapter"]["x"]["overall_delta"] == pytest.approx(0.3) and d["per_adapter"]["x"]["winner"] == "b"
    # an adapter in one run only is not measured in the other: no score, no delta, no winner (issue 10 #15)
    assert d["per_adapter"]["y"]["overall_b"] is None and d["per_adapter"]["y"]["winner"] == "only in a"
    assert d["per_adapter"]["y"]["overall_delta"] is None
    assert d["per_adapter"]["z"]["golden_rate_a"] is None and d["per_adapter"]["z"]["in_a"] is False
    assert d["per_adapter"]["z"]["winner"] == "only in b" and d["compared"] == 1
    tie = diff_reports(a, a, tolerance=0.01)
    assert tie["winner"] == "tie" and all(r["winner"] == "tie" for r in tie["per_adapter"].values())
    edge = diff_reports({"run_id": "A", "per_adapter": {"x": {"overall": 0.50, "golden_pass_rate": 0.5}}},
                        {"run_id": "B", "per_adapter": {"x": {"overall": 0.51, "golden_pass_rate": 0.5}}}, 0.01)
    assert edge["per_adapter"]["x"]["winner"] == "tie"  # exactly the tolerance is inside the band
    broken = diff_reports(a, {"run_id": "E", "per_adapter": {"x": {"overall": None, "golden_pass_rate": None},
                                                             "y": {"overall": 0.9, "golden_pass_rate": 0.9}}})
    assert broken["per_adapter"]["x"]["winner"] == "unmeasured"  # all errored: not a quality decline
    assert broken["overall_a"] == 0.9 and broken["winner"] == "tie"
    near = diff_reports(a, {"run_id": "C", "per_adapter": {"x": {"overall": 0.505, "golden_pass_rate": 0.5},
                                                           "y": {"overall": 0.9, "golden_pass_rate": 0.9}}})
    assert near["per_adapter"]["x"]["winner"] == "tie"
