"""`run --promote / --gate / --prompt-version / --junit / --pr-summary` end to end with the real CLI:
a promoted run, then a regressed run caused by a prompt version, against the scripted `follow`
adapter (tests/plugins/ef_ci_adapters.py: it answers with its system prompt and the user text)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import run_cli

PLUGINS = {"EVALFARM_PLUGINS": "ef_ci_adapters"}


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "suite.yaml").write_text(
        "name: support\nadapters: [follow]\nprompt: support\n"
        "prompts:\n"
        "  - {id: a, text: 'case a', expected_output_contains: [ok-a]}\n"
        "  - {id: b, text: 'case b', expected_output_contains: [ok-b]}\n"
        "  - {id: c, text: 'case c', expected_output_contains: [ok-c]}\n"
        "thresholds:\n  golden_pass_rate_min: 0.3\n  max_drop: 0.9\n")
    store = tmp_path / "prompts" / "support"
    store.mkdir(parents=True)
    (store / "v1.txt").write_text("Always say ok-a ok-b ok-c.")
    (store / "v2.yaml").write_text("system: Always say ok-a.\nuser: 'Q: {input}'\ndescription: shorter\n")
    (store / "current").write_text("v1\n")
    return tmp_path


def cli(project: Path, *args: str):
    return run_cli(*args, "--state-dir", str(project / "state"), cwd=project, **PLUGINS)


def runs(project: Path) -> list[list[str]]:
    res = cli(project, "ls")
    assert res.returncode == 0, res.stderr
    return [line.split("\t") for line in res.stdout.strip().splitlines()]


def test_promote_then_a_regressed_prompt_version_fails_the_gate(project):
    first = cli(project, "run", "suite.yaml", "--promote")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "prompt support@v1 (sha256:" in first.stdout and "by pointer" in first.stdout
    assert "promoted run" in first.stdout and "to baseline 'support' (new baseline)" in first.stdout
    [row] = runs(project)
    base_id = row[0]
    assert row[2] == "support" and row[3] == "PASS" and row[6] == "support@v1" and row[7] == "support"

    junit, summary = project / "junit.xml", project / "pr.md"
    second = cli(project, "run", "suite.yaml", "--prompt-version", "v2", "--gate", "--promote",
                 "--junit", str(junit), "--pr-summary", str(summary))
    assert second.returncode == 1, second.stdout + second.stderr
    out = second.stdout
    assert "gate: FAILED against baseline 'support'" in out
    assert "regressions  FAIL" in out and "floor        PASS" in out and "drop         PASS" in out
    assert "- follow/b" in out and "- follow/c" in out
    assert "not promoted to baseline 'support': the gate failed: regressions" in out
    rows = runs(project)
    assert len(rows) == 2 and rows[0][6] == "support@v2" and rows[0][3] == "PASS"  # thresholds alone pass
    assert rows[1][0] == base_id and rows[1][7] == "support"  # the baseline did not move
    new_id = rows[0][0]

    # the user template of v2 was applied to what was sent
    report = json.loads(Path(rows[0][4]).read_text())
    assert [o["output"] for o in report["outcomes"]] == ["Always say ok-a.\nQ: case a",
                                                          "Always say ok-a.\nQ: case b",
                                                          "Always say ok-a.\nQ: case c"]

    # JUnit: one testcase per case and adapter, failures with the reason, the brakes as a suite
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "3"
    suite = root.find("testsuite[@name='support.follow']")
    cases = {tc.get("name"): tc for tc in suite.findall("testcase")}
    assert sorted(cases) == ["a", "b", "c"] and cases["a"].find("failure") is None
    assert cases["b"].find("failure").get("message").startswith("missing expected substring 'ok-b'")
    gate_suite = root.find("testsuite[@name='support.gate']")
    brakes = {tc.get("name"): tc for tc in gate_suite.findall("testcase")}
    assert brakes["regressions"].find("failure") is not None and brakes["floor"].find("failure") is None

    text = summary.read_text()
    assert text.startswith("### ❌ evalfarm `support`: gate FAILED")
    assert "prompt `support@v2`" in text and f"baseline `support` `{base_id}`" in text
    assert "Regressed (2): `follow/b`, `follow/c`" in text and len(text.splitlines()) < 25

    # diff against the baseline by name: classification, McNemar, the prompt versions
    d = cli(project, "diff", "baseline:support", new_id, "--json")
    assert d.returncode == 0, d.stderr
    diff = json.loads(d.stdout)
    assert diff["cases"]["counts"] == {"regressed": 2, "fixed": 0, "still_broken": 0, "stable": 1, "unmeasured": 0}
    assert diff["cases"]["mcnemar"]["method"] == "exact binomial" and diff["cases"]["mcnemar"]["p_value"] == 0.5
    assert diff["prompts"]["a"]["version"] == "v1" and diff["prompts"]["b"]["version"] == "v2"
    assert diff["per_adapter"]["follow"]["overall_delta"] == pytest.approx(-2 / 3, abs=1e-6)
    table = cli(project, "diff", "baseline:support", new_id[:18])
    assert "regressed: follow/b, follow/c" in table.stdout and "not statistically meaningful" in table.stdout

    # the stored run re-gated with a spec that tolerates two regressions passes, without a model
    (project / "lenient.yaml").write_text((project / "suite.yaml").read_text() + "  max_regressions: 2\n")
    g = cli(project, "gate", new_id, "--spec", "lenient.yaml")
    assert g.returncode == 0, g.stdout + g.stderr


def test_a_changed_prompt_file_under_the_same_version_is_refused(project):
    assert cli(project, "run", "suite.yaml").returncode == 0
    (project / "prompts" / "support" / "v1.txt").write_text("Always say ok-a ok-b ok-c!")
    res = cli(project, "run", "suite.yaml")
    assert res.returncode == 2
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "prompts/support/v1.txt" in err and "prompt support@v1 changed since run" in err
    assert "save the change as a new version" in err
    assert len(runs(project)) == 1  # nothing ran, nothing was mixed in
    (project / "prompts" / "support" / "v3.txt").write_text("Always say ok-a ok-b ok-c!")
    assert cli(project, "run", "suite.yaml", "--prompt-version", "v3").returncode == 0


def test_json_output_stays_clean_and_gate_talks_on_stderr(project):
    res = cli(project, "run", "suite.yaml", "--gate", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["spec_name"] == "support"
    assert "gate: PASSED (no baseline)" in res.stderr


def test_usage_errors(project):
    res = cli(project, "run", "suite.yaml", "--promote", "--no-save")
    assert res.returncode == 2 and "--promote needs the run saved" in res.stderr
    res = cli(project, "run", "suite.yaml", "--prompt-version", "v9")
    assert res.returncode == 2 and "prompt 'support' has no version 'v9' (versions: v1, v2)" in res.stderr
    res = cli(project, "run", "suite.yaml", "--prompt-version", "../x")
    assert res.returncode == 2 and "not a valid name" in res.stderr
    res = cli(project, "gate", "baseline:nope")
    assert res.returncode == 2 and "no baseline named 'nope'" in res.stderr


def test_nothing_measured_run_exits_3_under_the_gate_and_is_not_promoted(tmp_path):
    (tmp_path / "s.yaml").write_text("name: b\nadapters: [broken]\nprompts:\n  - {id: a, text: hi}\n")
    res = run_cli("run", str(tmp_path / "s.yaml"), "--gate", "--promote", "--state-dir", str(tmp_path / "st"),
                  EVALFARM_PLUGINS="ef_test_adapters")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "not promoted to baseline 'b': nothing was measured" in res.stdout
    [line] = run_cli("ls", "--state-dir", str(tmp_path / "st")).stdout.strip().splitlines()
    res = run_cli("baseline", line.split("\t")[0], "--state-dir", str(tmp_path / "st"))
    assert res.returncode == 3 and "measured nothing" in res.stderr


def test_baseline_flag_without_gate_reports_the_diff_and_keeps_the_thresholds_exit_code(project):
    assert cli(project, "run", "suite.yaml", "--promote", "--baseline", "stable").returncode == 0
    res = cli(project, "run", "suite.yaml", "--prompt-version", "v2", "--baseline", "stable")
    assert res.returncode == 0, res.stdout + res.stderr  # no --gate: the thresholds decide
    assert "against baseline 'stable' (run " in res.stdout
    assert "cases: 3 shared; 1 stable, 2 regressed, 0 fixed, 0 still broken" in res.stdout
    summary = project / "gate.md"
    new_id = runs(project)[0][0]
    g = cli(project, "gate", new_id, "--baseline", "stable", "--pr-summary", str(summary), "--junit",
            str(project / "g.xml"))
    assert g.returncode == 1
    text = summary.read_text()
    assert "gate FAILED" in text and "**regressions** ❌" in text and "McNemar p=0.5" in text
    assert "| follow | 0.333 | 33.3% | 0/3 | -0.667 |" in text
    res = cli(project, "run", "suite.yaml", "--baseline", "missing")
    assert res.returncode == 2 and "--baseline missing: no baseline of that name" in res.stderr


def test_run_cases_reads_the_outcomes_once_and_refuses_a_bad_one_in_one_line(project):
    """``run --gate``/``--junit`` take what they need of a finished run's outcomes as they stream from the
    run store (ci.pipeline.run_cases): the case counts and JUnit lines of a real run's report, and a
    malformed outcome (the store is shared) is one line naming it, as a report file's would be."""
    from evalfarm.ci.diff import CaseTrials
    from evalfarm.ci.pipeline import run_cases
    from evalfarm.errors import UsageError

    res = cli(project, "run", "suite.yaml", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    head = {k: v for k, v in report.items() if k not in ("outcomes", "prompts")}
    outcomes = report["outcomes"]
    trials, junit = run_cases(report["run_id"], head, iter(outcomes), junit=True)
    whole = CaseTrials()
    for o in outcomes:
        whole.add(o, None)
    assert trials.trials == whole.trials and sum(len(c) for c in trials.trials.values()) == len(outcomes)
    assert sum(len(c) for c in junit.cases.values()) == len(outcomes)
    with pytest.raises(UsageError) as err:
        run_cases(report["run_id"], head, iter([outcomes[0], {"adapter": 5}]), junit=False)
    assert str(err.value).startswith(f"run {report['run_id']}: the report in the run store is not usable (outcomes[1]")
