"""Failure classes of agent items (core/failure.py), each reproduced for real: a `command:` agent
(tests/agent_failclass.py) run by `evalfarm run` in a real sandbox against a real mock-provider.
A task whose CLI cannot start (exit 127) and one whose model endpoint answers 503 (that task only)
are infra_failed: run 1 + 2 times, then left out of the pass rate's denominator with their reasons;
a missing check program is verifier_failed (unmeasured, not retried); an agent that used its whole
time is agent_timeout and a finished agent whose check fails is agent_failed (both measured, failed)."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT, run_cli
from spawn_support import make_repo, report_of, spawn_env, write_spec

AGENT = f"{sys.executable} {ROOT / 'tests' / 'agent_failclass.py'} {{base_url}} {{prompt}}"
EDIT = "sed -i s/hello/hi/ hello.py"
CHECK = "grep -q hi hello.py"
TASKS = [  # id, prompt, check, timeout_s -> class, retried, in the denominator
    ("ok", EDIT, CHECK, None, "passed", False, True),
    ("wrong", "true", CHECK, None, "agent_failed", False, True),
    ("slow", "sleep 30", CHECK, 2, "agent_timeout", False, True),
    ("nocheck", EDIT, "no-such-checker-7f3a hello.py", None, "verifier_failed", False, False),
    ("nocli", "exec /nonexistent/agent-cli-7f3a", CHECK, None, "infra_failed", True, False),
    ("down", f"[[status:503]]\n{EDIT}", CHECK, None, "infra_failed", True, False),
    # the agent's own words name a 503 (its test of the app said so), but the relay saw the endpoint answer:
    # the agent failed; on words alone it was infra_failed, retried and left out of the denominator
    # the endpoint hangs on the agent's only call until the task's time is up: not the agent's timeout
    ("hung", f"[[slow:8000]]\n{EDIT}", CHECK, 3, "infra_failed", True, False),
    ("words", "echo 'the app said: HTTP 503 Service Unavailable' >&2; exit 1", CHECK, None, "agent_failed", False,
     True),
]



def fake_agent(url: str) -> dict:
    """The `command:` agent of these tests (tests/agent_failclass.py), against the mock at ``url``."""
    return {"id": "fake", "provider": "agent", "agent": "command", "template": AGENT, "model": "fake-1",
            "base_url": url}

@pytest.fixture(scope="module")
def run(tmp_path_factory, ):
    from providers_fixture import MockProviderProc

    tmp = tmp_path_factory.mktemp("failclass")
    server = MockProviderProc()
    try:
        repo = make_repo(tmp / "repo")
        prompts = [{"id": i, "text": t, "check": c, **({"timeout_s": s} if s else {})} for i, t, c, s, *_ in TASKS]
        adapter = fake_agent(server.url)
        spec = write_spec(tmp / "classes.yaml", repo, prompts, adapters=[adapter])
        res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp, timeout=120, **spawn_env(tmp))
        yield report_of(res), server.stats()
    finally:
        server.stop()


def test_each_fault_gets_its_class_and_only_infra_is_retried(run):
    report, stats = run
    got = {o["prompt_id"]: o for o in report["outcomes"]}
    table = []
    for pid, _, _, _, cls, retried, counted in TASKS:
        o = got[pid]
        attempts = (o.get("agent") or {}).get("attempts", 1)
        table.append((pid, o["failure_class"], attempts, o["passed"]))
        assert o["failure_class"] == cls, (pid, o)
        assert (attempts == 3) is retried, (pid, o.get("agent"))
        assert (o["passed"] is not None) is counted, (pid, o)
    assert stats["statuses"].get("503") == 3  # the 503 task asked the endpoint 1 + 2 times
    assert "exit code 127" in got["nocli"]["error"]["message"]
    print("\n".join(f"{p:8} {c:16} attempts {a}  passed {v}" for p, c, a, v in table))


def test_infra_and_verifier_failures_are_out_of_the_denominator_and_reported_as_coverage(run):
    report, _ = run
    fig = report["per_adapter"]["fake"]
    assert fig["failure_classes"] == {"passed": 1, "agent_failed": 2, "agent_timeout": 1, "verifier_failed": 1,
                                      "infra_failed": 3}
    assert (fig["measured"], fig["items"], fig["passed"], fig["pass_rate"]) == (4, 8, 1, pytest.approx(1 / 4, abs=1e-6))
    assert fig["coverage"] == 0.5
    assert fig["coverage_line"] == ("pass rate 25% over 4 of 8 tasks; 3 infrastructure failures; 1 check failure")
    reasons = {u["prompt_id"]: (u["class"], u["reason"]) for u in fig["unmeasured"]}
    assert set(reasons) == {"nocheck", "nocli", "down", "hung"}
    assert "the model endpoint had not answered its last call" in reasons["hung"][1]
    assert "503" in reasons["down"][1] and "127" in reasons["nocli"][1]
    assert "exit 127" in reasons["nocheck"][1]


def test_console_and_markdown_say_the_coverage_and_the_infra_headline(run):
    import io

    from rich.console import Console

    from evalfarm.cli.console import print_summary
    from evalfarm.core.report.markdown import render_markdown

    report, _ = run
    md = render_markdown(report)
    headline = "INFRASTRUCTURE FAILURES: 3 of 8 agent tasks (38%) could not be measured (more than 20%)"
    assert headline in md and md.index(headline) < md.index("- result:")
    assert "- fake: pass rate 25% over 4 of 8 tasks; 3 infrastructure failures; 1 check failure" in md
    buf = io.StringIO()
    print_summary(report, [], Console(file=buf, width=200))
    text = buf.getvalue()
    assert headline in text and "fake: pass rate 25% over 4 of 8 tasks" in text
    assert "unmeasured down (infra_failed): " in text and "HTTP 503" in text


def test_ab_refuses_a_winner_when_coverage_differs_and_scores_only_measured_runs():
    from evalfarm.ab import compare

    def rows(passes: int, infra: int, n: int = 10) -> list[dict]:
        return [{"task": f"t{i}", "passed": None if i < infra else i < infra + passes,
                 **({"failure_class": "infra_failed"} if i < infra else {}),
                 "input_tokens": 10, "output_tokens": 1, "cost_usd": 0.01} for i in range(n)]

    a, b = rows(passes=2, infra=0), rows(passes=7, infra=3)  # b: 7 of 7 measured passed, 3 infra failures
    fa, fb = compare.arm_figures(a), compare.arm_figures(b)
    assert fb["pass_rate"] == 1.0 and fb["coverage"] == 0.7 and fb["unmeasured_runs"] == {"infra_failed": 3}
    assert "coverage" not in fa
    v = compare.verdict("a", fa, "b", fb, compare.compare_arms("a", a, fa, "b", b, fb), rows=(a, b))
    assert v["result"] == "incomparable" and v["winner"] is None and "coverage differs" in v["reason"], v
    b2 = rows(passes=9, infra=1)  # within the margin: the measured runs decide (b wins on quality)
    fb2 = compare.arm_figures(b2)
    v2 = compare.verdict("a", fa, "b", fb2, compare.compare_arms("a", a, fa, "b", b2, fb2), rows=(a, b2))
    assert v2["winner"] == "b" and fb2["pass_rate"] == 1.0, v2


def test_resume_only_infra_failed_reruns_just_those_items_on_the_farm(tmp_path, redis_server, start_worker):
    """A farm run where one task's agent CLI is missing (infra_failed after 1 + 2 attempts); the CLI is
    installed; `evalfarm resume RUN --only infra_failed` runs that task alone again (the passed task is
    not run again) and the new report counts it: 2 of 2 measured, coverage 100%."""
    from providers_fixture import MockProviderProc

    main, spawn_url = redis_server.url, redis_server.url[:-1] + "1"
    env = spawn_env(tmp_path, EVALFARM_SPAWN_BROKER_URL=spawn_url)
    runs, cli = tmp_path / "runs.log", tmp_path / "late-cli"
    server = MockProviderProc()
    try:
        repo = make_repo(tmp_path / "repo")
        adapter = fake_agent(server.url)
        spec = write_spec(tmp_path / "resume.yaml", repo, [
            {"id": "ok", "text": f"echo ok >> {runs}; {EDIT}", "check": CHECK},
            {"id": "late", "text": f"echo late >> {runs}; exec {cli}", "check": CHECK}], adapters=[adapter],
            isolation="none")  # the agent writes a log and runs a CLI outside its worktree
        start_worker(main, pool="aggregate", concurrency=1, **env)
        start_worker(main, pool="spawn", concurrency=2, extra_args=["--allow-unsandboxed"], **env)
        first = report_of(run_cli("run", str(spec), "--json", "--no-save", broker=main, cwd=tmp_path, timeout=120,
                                  **env))
        by = {o["prompt_id"]: o for o in first["outcomes"]}
        assert by["late"]["failure_class"] == "infra_failed" and by["ok"]["failure_class"] == "passed", (by["late"].get("error"), by["ok"].get("error"))
        assert first["per_adapter"]["fake"]["coverage"] == 0.5
        assert runs.read_text().split().count("late") == 3 and runs.read_text().split().count("ok") == 1
        cli.write_text(f"#!/bin/sh\n{EDIT}\n")
        cli.chmod(0o755)
        res = run_cli("resume", first["run_id"], "--only", "infra_failed", "--json", "--no-save", broker=main,
                      cwd=tmp_path, timeout=120, **env)
        assert res.returncode == 0, res.stderr
        assert "dispatched 1 infra_failed items" in res.stderr
        second = report_of(res)
        by2 = {o["prompt_id"]: o for o in second["outcomes"]}
        assert by2["late"]["failure_class"] == "passed" and by2["ok"] == by["ok"]
        fig = second["per_adapter"]["fake"]
        assert (fig["items"], fig["measured"], fig["passed"], fig["coverage"]) == (2, 2, 2, 1.0)
        assert runs.read_text().split().count("late") == 4 and runs.read_text().split().count("ok") == 1
        again = run_cli("resume", first["run_id"], "--only", "infra_failed", "--json", "--no-save", broker=main,
                        cwd=tmp_path, timeout=60, **env)
        assert again.returncode == 0 and "dispatched 0 infra_failed items" in again.stderr, again.stderr
    finally:
        server.stop()


def test_worker_metrics_count_agent_items_by_failure_class(run):
    from evalfarm.executors.celery import metrics

    report, _ = run
    before = {c: metrics.REGISTRY.get_sample_value("evalfarm_agent_items_total", {"adapter": "fake", "failure_class": c})
              or 0.0 for c in ("passed", "infra_failed", "agent_timeout")}
    for o in report["outcomes"]:
        metrics.record_outcome(o)
    after = {c: metrics.REGISTRY.get_sample_value("evalfarm_agent_items_total", {"adapter": "fake", "failure_class": c})
             for c in before}
    assert {c: after[c] - before[c] for c in before} == {"passed": 1, "infra_failed": 3, "agent_timeout": 1}
    slow = next(o for o in report["outcomes"] if o["prompt_id"] == "slow")
    assert metrics.status_of(slow) == "failed"  # measured, as the report counts it


def test_budget_stopped_agent_items_are_a_failure_class_of_the_report(tmp_path):
    """Two agent tasks one at a time under --max-cost below the first task's cost: the second is never
    sent, and the report counts it as budget_stopped (unmeasured), not as an error or a plain skip."""
    from spawn_support import FAKE_TEMPLATE

    repo = make_repo(tmp_path / "repo")
    adapter = {"id": "fake", "provider": "agent", "agent": "command", "template": FAKE_TEMPLATE, "model": "fake-1"}
    spec = write_spec(tmp_path / "budget.yaml", repo, [{"id": f"t{i}", "text": "ok", "check": "true"} for i in (1, 2)],
                      adapters=[adapter], isolation="none")
    res = run_cli("run", str(spec), "--json", "--no-save", "--max-cost", "0.004", "--force", cwd=tmp_path, timeout=120,
                  **spawn_env(tmp_path, EVALFARM_SPAWN_CONCURRENCY="1"))
    report = report_of(res)
    assert [o["failure_class"] for o in report["outcomes"]] == ["passed"]  # the unsent one is left, not an outcome
    assert report["stopped"] == "budget" and report["budget"]["items_left"] == 1
    fig = report["per_adapter"]["fake"]
    assert fig["failure_classes"] == {"passed": 1, "budget_stopped": 1}
    assert fig["coverage_line"] == "pass rate 100% over 1 of 2 tasks; 1 stopped by the budget"


def test_a_failing_task_setup_is_infra_failed_retried_and_unmeasured(tmp_path):
    """The task's `setup` fails (exit 3) before the agent runs: the host's fault, not the agent's:
    infra_failed, run 1 + 2 times, out of the pass rate's denominator with the setup's reason."""
    from providers_fixture import MockProviderProc

    server = MockProviderProc()
    try:
        repo = make_repo(tmp_path / "repo")
        adapter = fake_agent(server.url)
        spec = write_spec(tmp_path / "setup.yaml", repo, [{"id": "ok", "text": EDIT, "check": CHECK,
                                                           "setup": "echo preparing; exit 3"}], adapters=[adapter])
        report = report_of(run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120,
                                   **spawn_env(tmp_path)))
        requests = server.stats()["requests"]
    finally:
        server.stop()
    [o] = report["outcomes"]
    assert o["failure_class"] == "infra_failed" and o["passed"] is None, o
    assert (o.get("agent") or {}).get("attempts") == 3, o.get("agent")
    assert "setup" in o["error"]["message"], o["error"]
    assert requests == 0  # the agent never ran, so it never called the model
