"""Issue 17 item 8, what a new user met in the figures evalfarm reports: `ab latest` finds the conflated
comparison a 3-arm run reported (and says it is conflated); a budget stop's parts add up to what was
spent; an agent run's estimate counts the agent's context and turns, not just the prompt. The real
CLI in subprocesses against a real `evalfarm mock-provider`."""
from __future__ import annotations

import json
import re

from conftest import EXAMPLES, run_cli


def test_ab_latest_finds_every_comparison_a_3_arm_run_reported(tmp_path):
    res = run_cli("ab", "--suite", str(EXAMPLES / "ab" / "suite.yaml"), "--arm-a", "baseline", "--arm-b", "terse",
                  "--arms", "3", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    [artifact] = (tmp_path / ".evalfarm" / "reports" / "eval_ab").glob("*.json")
    labels = {(c["a"], c["b"]): c["label"] for c in json.loads(artifact.read_text())["comparisons"]}
    assert labels == {("control", "terse"): "honest", ("baseline", "terse"): "conflated"}
    conflated = run_cli("ab", "latest", "baseline", "terse", cwd=tmp_path)
    assert conflated.returncode == 0, conflated.stderr
    entry = json.loads(conflated.stdout)
    assert (entry["a"], entry["b"], entry["label"], entry["honest"]) == ("baseline", "terse", "conflated", False)
    assert entry["artifact_sha256"] == artifact.stem
    assert "labels this comparison conflated" in conflated.stderr
    honest = run_cli("ab", "latest", "terse", "control", cwd=tmp_path)  # either order
    assert honest.returncode == 0 and json.loads(honest.stdout)["label"] == "honest" and not honest.stderr
    audit = run_cli("audit", "verify", cwd=tmp_path)  # every index line cites the artifact's audit entry
    assert audit.returncode == 0 and audit.stdout.startswith("OK"), audit.stdout + audit.stderr


def priced_spec(tmp, url: str, n: int):
    """Each item: 100 tokens in and out at $1,000 per million, $0.20; judged by a priced judge."""
    words = " ".join(["abc"] * 99)
    lines = ["name: budget", "adapters:",
             f"  - {{id: small, model: m1, base_url: '{url}', params: {{max_tokens: 100}}, "
             "price: {input: 1000, output: 1000}}",
             f"judge: {{model: j1, base_url: '{url}', price: {{input: 1000, output: 1000}}, params: {{max_tokens: 50}}}}",
             "prompts:"]
    lines += [f"  - {{id: p{i:03d}, text: '{words} w{i}', criteria: [{{id: ok, description: fine}}]}}" for i in range(n)]
    path = tmp / "spec.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


PARTS = re.compile(r"\$([\d.]+) spent of \$[\d.]+ \(model \$([\d.]+) \+ judge \$([\d.]+) on the (\d+) items measured"
                   r"(?: \+ \$([\d.]+) on (\d+) answer\(s\) whose judge call the budget stopped)?"
                   r"(?: ([+-]) \$([\d.]+) the run's spend counter holds beyond its stored items)?")


def test_a_budget_stop_names_parts_that_add_up_to_the_spend(tmp_path, provider):
    server = provider("--latency-ms", "30")
    spec = priced_spec(tmp_path, server.url, 30)
    state = tmp_path / "state"
    res = run_cli("run", str(spec), "--state-dir", str(state), "--max-cost", "2", "--force", "--concurrency", "8")
    assert res.returncode == 1, res.stderr
    [line] = [x for x in res.stderr.splitlines() if "stopped at the budget" in x]
    m = PARTS.search(line)
    assert m, line
    spent, model, judge = float(m[1]), float(m[2]), float(m[3])
    unjudged = float(m[5] or 0)
    other = float(m[8] or 0) * (-1 if m[7] == "-" else 1)
    assert abs(model + judge + unjudged + other - spent) < 2e-6, line
    [path] = [p for p in (state / "runs").glob("*.json") if not p.name.endswith(".lineage.json")]
    report = json.loads(path.read_text())
    b = report["budget"]
    assert int(m[4]) == report["items_done"] and b["unjudged_items"] == int(m[6] or 0)
    # what the server was asked for and answered, priced, is what the line says was spent
    assert abs(b["spent_usd"] - spent) < 1e-6 and spent > 2
    print(f"\n{line}")


def test_an_agent_runs_estimate_counts_its_context_and_turns(tmp_path):
    """The estimate of a priced agent task (no request is sent: the budget refuses it first)."""
    from agents_fixtures import make_repo
    from evalfarm.engine.budget import (AGENT_CONTEXT_TOKENS, AGENT_TURN_GROWTH_TOKENS, DEFAULT_AGENT_CONTEXT_TOKENS,
                                        DEFAULT_AGENT_TURNS, DEFAULT_OUTPUT_TOKENS, estimate)
    from evalfarm.spec.models import EvalSpec

    def spec(**params):
        return EvalSpec.model_validate({
            "name": "agent", "workspace": {"repo": str(tmp_path), "base": "main"},
            "adapters": [{"id": "c", "provider": "agent", "agent": "claude", "model": "m", "params": params,
                          "price": {"input": 3, "output": 15}}],
            "prompts": [{"id": "p", "text": "Change the greeting in hello.py to hello, world"}]})

    task = 12  # the prompt's 48 characters / 4
    turns, ctx = DEFAULT_AGENT_TURNS, AGENT_CONTEXT_TOKENS["claude"]
    est = estimate(spec(), spec().prompts)
    assert est.input_tokens == turns * (ctx + task) + AGENT_TURN_GROWTH_TOKENS * turns * (turns - 1) // 2
    assert est.output_tokens == turns * DEFAULT_OUTPUT_TOKENS and est.agent_items == 1
    assert "agent tasks, each ~10 model requests" in est.line() and est.input_tokens > 1146  # the run
    stated = estimate(spec(max_turns=3, max_tokens=200), spec().prompts)
    assert stated.input_tokens == 3 * (ctx + task) + AGENT_TURN_GROWTH_TOKENS * 3 and stated.output_tokens == 600

    repo = make_repo(tmp_path / "repo")
    (tmp_path / "agent.yaml").write_text(json.dumps({
        "name": "agent", "workspace": {"repo": str(repo), "base": "main"},
        "adapters": [{"id": "c", "provider": "agent", "agent": "command", "template": "true {prompt}", "model": "m",
                      "price": {"input": 3, "output": 15}}],
        "prompts": [{"id": "p", "text": "Change the greeting in hello.py to hello, world"}]}))
    res = run_cli("run", str(tmp_path / "agent.yaml"), "--no-save", "--max-cost", "0.05")
    assert res.returncode == 2 and "exceeds the budget $0.05" in res.stderr, res.stderr
    a_in = turns * (DEFAULT_AGENT_CONTEXT_TOKENS + task) + AGENT_TURN_GROWTH_TOKENS * turns * (turns - 1) // 2
    assert "agent tasks" in res.stderr and f"~{a_in:,} tokens in" in res.stderr, res.stderr
