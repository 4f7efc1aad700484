"""The A/B harness's pure parts: profiles, loaders, statistics, verdicts, ledger, audit chain, artifact."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from evalfarm.ab import audit, compare
from evalfarm.runs import ledger
from evalfarm.ab.artifact import build, header_of, to_bytes, verify_rows
from evalfarm.ab.executors import SYNTHETIC_PRICE, SyntheticExecutor, synthetic_cost
from evalfarm.ab.harness import plan_arms, run_suite, run_variants
from evalfarm.ab.profiles import CONTROL, PROFILES, profile
from evalfarm.ab.tasks import load_suite, load_tasks, load_variant
from evalfarm.errors import SpecError, UsageError

EX = Path(__file__).resolve().parent.parent / "examples" / "ab"


def row(task, passed=True, usd=0.001, tin=10, tout=20, arm="a", trial=0, error=None):
    return {"task": task, "passed": passed, "cost_usd": usd, "input_tokens": tin, "output_tokens": tout,
            "arm": arm, "trial": trial, "error": error}


# -- profiles and loaders ------------------------------------------------------------------------

def test_profiles_are_hashed_and_unknown_names_are_usage_errors():
    assert set(PROFILES) == {"baseline", "balanced", "terse", "verbose"}
    assert PROFILES["baseline"].addendum is None and PROFILES["baseline"].addendum_sha256 is None
    terse = PROFILES["terse"]
    assert terse.addendum_sha256 == hashlib.sha256(terse.addendum.encode()).hexdigest()
    assert CONTROL.addendum == "Be brief." and "control" not in PROFILES
    with pytest.raises(UsageError, match="unknown profile 'tersee'"):
        profile("tersee")


def test_plan_arms_two_and_three():
    arms, pairs = plan_arms("balanced", "terse", 2)
    assert [a.name for a in arms] == ["balanced", "terse"] and pairs[0]["honest"]
    arms, pairs = plan_arms("baseline", "terse", 3)
    assert [(a.name, a.role) for a in arms] == [("baseline", "baseline"), ("control", "control"),
                                                ("terse", "candidate")]
    assert pairs[0] == {"a": "control", "b": "terse", "label": "honest", "honest": True}
    assert pairs[1]["label"] == "conflated" and not pairs[1]["honest"]
    with pytest.raises(UsageError, match="both 'terse'"):
        plan_arms("terse", "terse", 2)
    with pytest.raises(UsageError, match="pass --arm-a baseline"):
        plan_arms("balanced", "terse", 3)


def test_loaders_name_file_line_and_field(tmp_path):
    assert load_variant(EX / "variant_b.yaml").model == "echo"
    assert [t.id for t in load_tasks(EX / "tasks.yaml")] == ["capital", "sum", "greeting"]
    suite = load_suite(EX / "suite.yaml")
    assert suite.name == "ab-smoke" and suite.scorer == "contains" and len(suite.tasks) == 12

    bad = tmp_path / "tasks.yaml"
    bad.write_text("tasks:\n  - id: a\n    input: x\n    expected: y\n  - id: b\n    input: x\n    expect: y\n")
    with pytest.raises(SpecError) as e:
        load_tasks(bad)
    assert str(e.value).startswith(f"{bad}:7: tasks[1].expect: unknown field (did you mean 'expected'?); allowed fields are expected, id, input")
    bad.write_text("tasks:\n  - {id: a, input: x, expected: y}\n  - {id: a, input: z, expected: y}\n")
    with pytest.raises(SpecError, match=r"tasks.yaml:3: tasks\[1\].id: duplicate task id 'a' \(first on line 2\)"):
        load_tasks(bad)
    bad.write_text("name: v\n")
    with pytest.raises(SpecError, match=r"variant.yaml:1: prompt: required field is missing"):
        load_variant(bad.rename(tmp_path / "variant.yaml"))
    empty = tmp_path / "suite.yaml"
    empty.write_text("name: s\ntasks: []\n")
    with pytest.raises(SpecError, match=r"suite.yaml:2: tasks: the 'tasks' list is empty"):
        load_suite(empty)
    empty.write_text("tasks:\n  - {id: a, input: x, expected: y}\nscorer: fuzzy\n")
    with pytest.raises(SpecError, match=r"suite.yaml:3: scorer: .*'exact', 'contains' or 'none'"):
        load_suite(empty)


# -- statistics and verdicts ---------------------------------------------------------------------

def test_median_and_arm_figures():
    assert compare.median([]) is None
    assert compare.median([3, 1, 2]) == 2.0 and compare.median([4, 1, 3, 2]) == 2.5
    rows = [row("t1", True, 0.001, 10, 20), row("t2", False, 0.003, 10, 40), row("t3", True, 0.002, 10, 30)]
    f = compare.arm_figures(rows)
    assert f["runs"] == 3 and f["tasks"] == 3 and f["passes"] == 2
    assert f["pass_rate"] == round(2 / 3, 10) and f["median_tokens"] == 40.0 and f["median_usd"] == 0.002
    assert f["total_usd"] == 0.006 and f["not_measured"] == {}
    assert f["cost_measured"] and f["quality_measured"]


def test_unmeasured_axes_are_structured():
    f = compare.arm_figures([row("t1", None, None), row("t2", None, None, error="ConnectionError")])
    assert not f["cost_measured"] and not f["quality_measured"]
    assert f["not_measured"]["cost"] == {"reason": "runtime_error", "runs_missing": 2, "runs_errored": 1}
    assert f["not_measured"]["quality"]["reason"] == "runtime_error"
    f = compare.arm_figures([row("t1", None, 0.1)])
    assert f["not_measured"] == {"quality": {"reason": "not_scored", "runs_missing": 1, "runs_errored": 0}}
    assert compare.arm_figures([])["not_measured"]["cost"]["reason"] == "no_runs"


def _verdict(a_rows, b_rows):
    fa, fb = compare.arm_figures(a_rows), compare.arm_figures(b_rows)
    deltas = compare.compare_arms("a", a_rows, fa, "b", b_rows, fb)
    return compare.verdict("a", fa, "b", fb, deltas, rows=(a_rows, b_rows)), deltas


def test_no_partial_winner_when_an_axis_is_unmeasured():
    a = [row(f"t{i}", True, 0.01) for i in range(10)]
    b = [row(f"t{i}", False, None) for i in range(10)]  # far worse quality, but cost unknown
    v, deltas = _verdict(a, b)
    assert v["result"] == "incomparable" and v["winner"] is None
    assert v["not_measured"] == [{"arm": "b", "axis": "cost", "reason": "price_unknown", "runs_missing": 10,
                                  "runs_errored": 0}]
    assert deltas["median_usd"] == {"not_measured": {"axis": "cost", "arms": ["b"]}}
    assert "delta" in deltas["pass_rate"]


def test_quality_decides_when_its_interval_excludes_zero():
    a = [row(f"t{i}", True, 0.002) for i in range(20)]
    b = [row(f"t{i}", i % 4 == 0, 0.001) for i in range(20)]  # cheaper but fails 75%
    v, d = _verdict(a, b)
    assert v["result"] == "winner" and v["winner"] == "a" and v["decided_by"] == "quality"
    assert d["pass_rate"]["delta"] == -0.75 and d["pass_rate"]["ci95"][1] < 0


def test_cost_breaks_only_a_proven_quality_tie():
    a = [row(f"t{i}", i % 5 != 0, 0.002) for i in range(100)]
    b = [row(f"t{i}", i % 5 != 0, 0.001) for i in range(100)]  # the same cases pass, half the cost
    v, d = _verdict(a, b)
    assert d["pass_rate"]["delta"] == 0.0 and d["pass_rate"]["method"] == "paired-task-clustered"
    lo, hi = d["pass_rate"]["ci95"]
    assert -0.05 < lo < 0 < hi < 0.05  # shown equal within the margin, but never a zero-width interval
    assert v == {**v, "result": "winner", "winner": "b", "decided_by": "cost"}
    # cost within tolerance (1%) and quality shown equal: a tie, reasons include both intervals
    b2 = [row(f"t{i}", i % 5 != 0, 0.00199) for i in range(100)]
    v, d = _verdict(a, b2)
    assert v["result"] == "tie" and v["winner"] is None and "95% CI" in v["reason"]


def test_agreeing_tasks_are_not_a_tie_until_there_are_enough_of_them():
    """Issue 20: one task x one trial gave 'TIE (95% CI [+0.0000, +0.0000])' and a winner by cost; twenty
    tasks that all agree gave the same. The paired interval needs evidence for a tie."""
    for n in (1, 20):
        a = [row(f"t{i}", i % 5 != 0, 0.002) for i in range(n)]
        b = [row(f"t{i}", i % 5 != 0, 0.001) for i in range(n)]
        v, d = _verdict(a, b)
        assert v["result"] == "inconclusive" and v["winner"] is None, (n, v)
        lo, hi = d["pass_rate"]["ci95"]
        assert lo < -0.05 and hi > 0.05
    one = _verdict([row("t0", True, 0.002)], [row("t0", True, 0.001)])[1]
    assert one["pass_rate"]["ci95"] == [-1.0, 1.0]
    assert one["median_usd"]["ci95"] is None and not one["median_usd"]["ci_excludes_zero"]  # no interval from one task
    assert "about" in _verdict([row("t0", True)], [row("t0", True)])[0]["reason"]


def test_a_wide_quality_interval_is_inconclusive_not_a_tie():
    """Issue 10 #19: 3 tasks x 2 trials, pass rate 0.83 -> 0.50, interval [-1.0, +0.5] was reported as
    'WINNER (by cost): quality tie'. A tie needs the interval inside the margin; the verdict says how many
    trials would be needed."""
    a = [row(f"t{i % 3}", i != 5, 0.002) for i in range(6)]  # 5 of 6 pass
    b = [row(f"t{i % 3}", i in (0, 1, 2), 0.001) for i in range(6)]  # 3 of 6 pass, half the cost
    v, d = _verdict(a, b)
    lo, hi = d["pass_rate"]["ci95"]
    assert round(d["pass_rate"]["delta"], 4) == -0.3333 and lo < 0 <= hi  # the old rule: "quality tie"
    assert v["result"] == "inconclusive" and v["winner"] is None
    assert "non-inferiority margin +-0.05" in v["reason"]
    a3 = [row(f"t{i}", i < 20, 0.002) for i in range(40)]
    b3 = [row(f"t{i}", i < 19, 0.002) for i in range(40)]  # a small delta, a wide interval: trials help
    v3, d3 = _verdict(a3, b3)
    assert v3["result"] == "inconclusive" and v3["trials_needed"] > 1 and "trials per task" in v3["reason"]
    assert v3["lower_bound"] and "at least" in v3["reason"]  # one trial per task: the split is unknown
    assert compare.parameters()["noninferiority_margin"] == 0.05
    assert compare.parameters()["quality_interval"] == "paired-task-clustered"


def test_a_delta_beyond_the_margin_says_what_would_show_it():
    """15 tasks x 3 trials, b 0.09 worse (one trial lost on 4 tasks): no tie can be shown, no winner yet;
    the advice is the trials per task that would show the difference at 80% power if it is real."""
    a = [row(f"t{i}", True, trial=k) for i in range(15) for k in range(3)]
    b = [row(f"t{i}", not (i < 4 and k == 0), trial=k) for i in range(15) for k in range(3)]
    v, d = _verdict(a, b)
    assert v["result"] == "inconclusive" and v["trials_needed"] is None and v["trials_to_detect"] > 3
    assert f"about {v['trials_to_detect']} trials per task (now 3) would show it at 80% power" in v["reason"]


def test_when_tasks_disagree_more_trials_cannot_show_a_tie_but_more_tasks_can():
    # 10 tasks x 4 trials: b is far better on half the tasks and far worse on the other half, every trial
    a = [row(f"t{i}", i % 2 == 0, 0.002, trial=k) for i in range(10) for k in range(4)]
    b = [row(f"t{i}", i % 2 == 1, 0.002, trial=k) for i in range(10) for k in range(4)]
    v, d = _verdict(a, b)
    assert d["pass_rate"]["delta"] == 0.0 and v["result"] == "inconclusive"
    assert v["trials_needed"] is None and v["tasks_needed"] > 10
    assert "more trials per task cannot show a tie with 10 tasks" in v["reason"]


def test_bootstrap_is_deterministic_and_paired_by_task():
    a = [row(f"t{i}", i % 3 == 0, 0.001 * (i + 1)) for i in range(15) for _ in range(2)]
    b = [row(f"t{i}", i % 2 == 0, 0.0005 * (i + 1)) for i in range(15) for _ in range(2)]
    for name in ("median_usd", "pass_rate", "median_tokens"):
        lo, hi = compare.bootstrap_delta(a, b, name)
        assert (lo, hi) == compare.bootstrap_delta(a, b, name)
        assert lo <= compare.stat(name, b) - compare.stat(name, a) <= hi
        # identical arms: a paired bootstrap gives exactly zero
        assert compare.bootstrap_delta(a, a, name) == (0.0, 0.0)
    # the interval moves with the data: b much cheaper than a excludes zero
    assert compare.bootstrap_delta(a, b, "median_usd")[1] < 0


# -- ledger ----------------------------------------------------------------------------------------

def test_ledger_rows_are_referenced_by_sha256_of_their_line_and_deduplicated(tmp_path):
    path = tmp_path / "l.jsonl"
    rows = [{"arm": "a", "cost_usd": 0.5}, {"arm": "b", "cost_usd": 0.25}]
    refs = ledger.append_rows(path, rows)
    lines = path.read_bytes().split(b"\n")
    assert refs == [hashlib.sha256(lines[0]).hexdigest(), hashlib.sha256(lines[1]).hexdigest()]
    assert ledger.append_rows(path, rows) == refs and len(path.read_bytes().splitlines()) == 2
    index = ledger.load(path)
    assert index[refs[1]].data == rows[1] and index[refs[1]].line == 2
    with pytest.raises(UsageError, match="ledger not found"):
        ledger.load(tmp_path / "missing.jsonl")


def test_synthetic_executor_is_deterministic_and_priced():
    assert synthetic_cost(1_000_000, 0) == SYNTHETIC_PRICE["input_per_mtok"]
    assert synthetic_cost(0, 1_000_000) == SYNTHETIC_PRICE["output_per_mtok"]
    with pytest.raises(UsageError, match="never go to the production spend ledger"):
        SyntheticExecutor().anchor([], Path(".evalfarm/cost/ledger.jsonl"), "plan")


# -- audit chain -----------------------------------------------------------------------------------

def test_audit_chain_links_signs_and_names_the_first_broken_entry(tmp_path):
    d = tmp_path / "audit"
    for i in range(3):
        e = audit.append(d, "eval.ab_comparison", {"n": i})
        assert e["seq"] == i + 1
    key = d / audit.KEY
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    good, broken = audit.verify(d)
    assert len(good) == 3 and broken is None and good[1]["prev"] == good[0]["digest"]

    lines = (d / audit.CHAIN).read_text().splitlines()
    tampered = json.loads(lines[1])
    tampered["data"]["n"] = 42
    lines[1] = json.dumps(tampered, sort_keys=True, separators=(",", ":"))
    (d / audit.CHAIN).write_text("\n".join(lines) + "\n")
    good, broken = audit.verify(d)
    assert len(good) == 1 and broken.seq == 2 and "HMAC mismatch" in broken.reason
    with pytest.raises(audit.AuditError, match="broken at entry 2"):
        audit.append(d, "eval.ab_comparison", {"n": 3})

    # dropping an entry breaks the next one's link
    (d / audit.CHAIN).write_text("\n".join([lines[0], lines[2]]) + "\n")
    _, broken = audit.verify(d)
    assert broken.seq == 2 and "seq is 3" in broken.reason


def test_audit_key_must_be_private(tmp_path):
    audit.append(tmp_path, "e", {})
    os.chmod(tmp_path / audit.KEY, 0o644)
    with pytest.raises(audit.AuditError, match="must be 0600"):
        audit.append(tmp_path, "e", {})


# -- harness and artifact (in-process farm) --------------------------------------------------------

def test_variant_mode_scores_deltas_and_winner(tmp_path):
    r = run_variants(variant_a=EX / "variant_a.yaml", variant_b=EX / "variant_b.yaml", tasks_path=EX / "tasks.yaml")
    assert (r["a"]["name"], r["a"]["n"], r["a"]["passes"]) == ("plain", 3, 2)
    assert (r["b"]["passes"], r["b"]["mean_score"]) == (1, round(1 / 3, 10))
    assert [(t["id"], t["score_a"], t["score_b"], t["delta"]) for t in r["tasks"]] == [
        ("capital", 1.0, 0.0, -1.0), ("sum", 1.0, 0.0, -1.0), ("greeting", 0.0, 1.0, 1.0)]
    assert r["verdict"]["result"] == "inconclusive" and "not inside the non-inferiority margin" in r["verdict"]["reason"]

    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n" + "".join(f"  - {{id: t{i}, input: x{i}, expected: 'Answer: x{i}'}}\n"
                                          for i in range(8)))
    r = run_variants(variant_a=EX / "variant_a.yaml", variant_b=EX / "variant_b.yaml", tasks_path=tasks)
    assert r["verdict"]["result"] == "winner" and r["verdict"]["winner"] == "plain"
    lo, hi = r["delta"]["pass_rate"]["ci95"]  # 8 of 8 tasks lost: paired, t(7), never a zero-width interval
    assert lo == -1.0 and -0.5 < hi < -0.2 and r["delta"]["pass_rate"]["method"] == "paired-task-clustered"
    r = run_variants(variant_a=EX / "variant_a.yaml", variant_b=EX / "variant_b.yaml", tasks_path=tasks,
                     scorer="none")
    assert r["verdict"]["result"] == "tie" and r["a"]["pass_rate"] is None
    assert r["delta"]["pass_rate"] == {"not_measured": {"axis": "quality", "reason": "scorer_none"}}


def test_identical_variant_names_are_an_error(tmp_path):
    b = tmp_path / "b.yaml"
    b.write_text("# same name\nname: plain\nprompt: other\n")
    with pytest.raises(SpecError, match=r"b.yaml:2: name: both variants are named 'plain'"):
        run_variants(variant_a=EX / "variant_a.yaml", variant_b=b, tasks_path=EX / "tasks.yaml")


def test_artifact_rebuilds_from_ledger_rows_and_catches_a_tampered_row(tmp_path):
    res = run_suite(suite_path=EX / "suite.yaml", arm_a="baseline", arm_b="terse", arms=3, trials=2,
                    executor=SyntheticExecutor(), ledger=tmp_path / "l.jsonl", reports_dir=tmp_path / "r",
                    audit_dir=tmp_path / "a")
    art = res.artifact
    assert res.path.name == hashlib.sha256(res.data).hexdigest() + ".json"
    assert res.data == json.dumps(art, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert art["arm_order"] == ["baseline", "control", "terse"]
    assert [c["label"] for c in art["comparisons"]] == ["honest", "conflated"]
    assert art["verdict"]["a"] == "control" and art["verdict"]["b"] == "terse"
    assert art["arms"]["terse"]["addendum_sha256"] == PROFILES["terse"].addendum_sha256
    for name, arm in art["arms"].items():
        assert arm["runs"] == 24 and arm["tasks"] == 12 and arm["cost_measured"] and arm["quality_measured"]
    index = ledger.load(tmp_path / "l.jsonl")
    rows = [index[r].data for r in art["arms"]["terse"]["ledger_rows"]]
    assert art["arms"]["terse"]["total_usd"] == round(sum(r["cost_usd"] for r in rows), 10)
    assert all(r["profile"] == "terse" and r["source"] == "synthetic" for r in rows)
    assert verify_rows(art, index) == ([], art)
    assert build(header_of(art), {a: [(ref, index[ref].data) for ref in art["arms"][a]["ledger_rows"]]
                                  for a in art["arm_order"]}) == art

    lines = (tmp_path / "l.jsonl").read_text().splitlines()
    victim = json.loads(lines[5])
    victim["cost_usd"] = victim["cost_usd"] / 2
    lines[5] = json.dumps(victim, sort_keys=True, separators=(",", ":"))
    (tmp_path / "l.jsonl").write_text("\n".join(lines) + "\n")
    problems, rebuilt = verify_rows(art, ledger.load(tmp_path / "l.jsonl"))
    assert rebuilt is None and len(problems) == 1 and "not found (the row was edited or removed)" in problems[0]

    forged = json.loads(res.data)
    forged["arms"]["terse"]["median_usd"] = 0.0
    problems, _ = verify_rows(forged, index)
    assert problems == ["arms: the artifact's figures differ from those recomputed from the ledger rows"]
    assert to_bytes(art) == res.data


def test_an_unscored_suite_needs_no_expected_answers(tmp_path):
    (tmp_path / "s.yaml").write_text("scorer: none\ntasks:\n  - {id: a, input: write a haiku}\n")
    assert load_suite(tmp_path / "s.yaml").tasks[0].expected is None
    (tmp_path / "c.yaml").write_text("tasks:\n  - {id: a, input: x, expected: y}\n  - {id: b, input: write a haiku}\n")
    with pytest.raises(SpecError, match=r"c\.yaml:3: tasks\[1\]\.expected: required with scorer 'contains'"):
        load_suite(tmp_path / "c.yaml")


# -- artifacts of earlier releases -----------------------------------------------------------------

LEGACY = Path(__file__).resolve().parent / "data" / "ab_legacy"


def test_artifacts_made_before_the_paired_interval_still_verify(tmp_path):
    """tests/data/ab_legacy: three artifacts made by the previous release (bootstrap intervals, among them
    the single-sample 'WINNER by cost' of issue 20). verify rebuilds each by the rule its parameters name."""
    import shutil

    from evalfarm.ab.harness import verify

    state = tmp_path / "state"
    shutil.copytree(LEGACY, state)
    os.chmod(state / "audit", 0o700)
    os.chmod(state / "audit" / "chain.key", 0o600)
    paths = sorted((state / "reports" / "eval_ab").glob("[0-9a-f]*.json"))
    assert len(paths) == 3
    verdicts = {}
    for path in paths:
        result = verify(path, ledger=state / "ab" / "ledger.jsonl", audit_dir=state / "audit")
        assert result.ok, result.checks
        art = json.loads(path.read_bytes())
        assert compare.is_legacy(art["parameters"])
        verdicts[art["suite"]["tasks"]] = art["verdict"]
    assert verdicts[1]["result"] == "winner" and verdicts[1]["decided_by"] == "cost"  # what users have today
    assert verdicts[40]["trials_needed"] == 13

    # the same rows under today's rule: the single sample is no longer a winner, let alone a tie
    one = json.loads(next(p for p in paths if json.loads(p.read_bytes())["suite"]["tasks"] == 1).read_bytes())
    index = ledger.load(state / "ab" / "ledger.jsonl")
    rows = {a: [(ref, index[ref].data) for ref in one["arms"][a]["ledger_rows"]] for a in one["arm_order"]}
    now = build(header_of(one), rows)
    assert now["verdict"]["result"] == "inconclusive" and now["comparisons"][0]["deltas"]["pass_rate"]["ci95"] == [-1.0, 1.0]


def test_an_edited_interval_method_does_not_verify(tmp_path):
    res = run_suite(suite_path=EX / "suite.yaml", arm_a="balanced", arm_b="terse", trials=2,
                    executor=SyntheticExecutor(), ledger=tmp_path / "l.jsonl", reports_dir=tmp_path / "r",
                    audit_dir=tmp_path / "a")
    art = res.artifact
    from evalfarm.stats.paired import METHOD
    assert art["parameters"]["quality_interval"] == compare.QUALITY_INTERVAL == METHOD
    assert art["comparisons"][0]["deltas"]["pass_rate"]["method"] == "paired-task-clustered"
    assert art["comparisons"][0]["deltas"]["median_usd"]["method"] == "task-cluster-bootstrap"
    index = ledger.load(tmp_path / "l.jsonl")
    assert verify_rows(art, index) == ([], art)
    dropped = json.loads(res.data)
    del dropped["parameters"]["quality_interval"]  # pretend it was made by the bootstrap rule
    problems, _ = verify_rows(dropped, index)
    assert "comparisons: the artifact's figures differ from those recomputed from the ledger rows" in problems
    from evalfarm.ab.artifact import shape_problem
    renamed = json.loads(res.data)
    renamed["parameters"]["quality_interval"] = "wald"
    assert "parameters.quality_interval: unknown method" in shape_problem(renamed)
