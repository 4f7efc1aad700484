"""`evalfarm ab --executor spawn`: each arm's tasks run as real coding agents in git worktrees. End to
end on the Redis farm with two spawn workers and real Claude Code against a scripted mock-provider
(`--arms 3`), then `ab verify` against the real ledger rows; in this process with the fake agent;
and the refusals (agent not installed, a prompt suite) as one line with exit 2."""
from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from agents_fixtures import EDIT_SCRIPT, MODELS, agent_server, installed  # noqa: F401 (fixture)
from conftest import run_cli
from evalfarm.ab.profiles import CONTROL, PROFILES
from spawn_support import assert_clean, fake_adapter, make_repo, spawn_env

KEY = {"ANTHROPIC_API_KEY": "sk-test-anthropic-0123456789"}


def write_suite(tmp_path, repo, adapters=None, n: int = 2, prompt: str = "Change the greeting in hello.py",
                **extra) -> str:
    suite = {"name": "greet", "repo": str(repo), "base": "main", **extra,
             "tasks": [{"id": f"t{i}", "prompt": prompt, "check": "python3 hello.py | grep -qx 'hello, world'"}
                       for i in range(n)]}
    if adapters:
        suite["adapters"] = adapters
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return str(path)


def test_ab_spawn_three_arms_on_the_farm_with_two_spawn_workers_verifies_against_the_ledger(
        tmp_path, agent_server, redis_server, start_worker):
    _, version = installed("claude")
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    suite = write_suite(tmp_path, repo, adapters=[{"id": "claude", "provider": "agent", "agent": "claude",
                                                   "model": MODELS["claude"]}])
    env = {**spawn_env(tmp_path), **KEY}
    start_worker(redis_server.url, pool="aggregate", concurrency=1, **env)
    for _ in range(2):
        start_worker(redis_server.url, pool="spawn", concurrency=2, **env)
    res = run_cli("ab", "--suite", suite, "--arm-a", "baseline", "--arm-b", "terse", "--arms", "3", "--executor",
                  "spawn", "--base-url", server.url, "--role", "backend", "--json", broker=redis_server.url,
                  cwd=tmp_path, timeout=600, **env)
    assert res.returncode == 0, res.stderr
    art = json.loads(res.stdout)
    ex = art["executor"]
    assert (ex["kind"], ex["agent"], ex["agent_version"], ex["model"]) == ("spawn", "claude", version, MODELS["claude"])
    assert len(ex["base"]) == 40 and ex["repo"] == "repo" and ex["base_url"] == server.url
    assert art["arm_order"] == ["baseline", "control", "terse"]
    for name in art["arm_order"]:
        arm = art["arms"][name]
        assert arm["runs"] == 2 and arm["pass_rate"] == 1.0 and arm["cost_measured"] and arm["quality_measured"]
        assert arm["agents"] == [f"claude {version}"] and arm["models_used"] == [MODELS["claude"]]
        assert (arm["median_turns"], arm["median_tool_calls"], arm["median_diff_lines"]) == (3, 2, 2)
        assert arm["median_tokens"] == 4590 and arm["median_usd"] == pytest.approx(0.01485)
    # the addendum reached the model the way Claude Code takes it (the system prompt): 2 tasks x 3 calls each
    def holding(text: str) -> int:
        return sum(1 for e in server.model_calls(grep=text) if e["grep"])

    assert holding(PROFILES["terse"].addendum) == 6 and holding(CONTROL.addendum) == 6
    assert len(server.model_calls()) == 3 * 2 * 3
    # one row per run in the real ledger, with the farm run id; the artifact verifies against them
    ledger = tmp_path / ".evalfarm" / "cost" / "ledger.jsonl"
    rows = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert len(rows) == 6 and len({r["run_id"] for r in rows}) == 1
    assert all(r["source"] == "spawn" and r["agent"] == "claude" and r["cost_source"] == "agent" for r in rows)
    assert sum(r["input_tokens"] for r in rows) == sum(e["usage"]["input_tokens"] for e in server.model_calls())
    digest = hashlib.sha256(res.stdout.strip().encode()).hexdigest()
    artifact = tmp_path / ".evalfarm" / "reports" / "eval_ab" / f"{digest}.json"
    verify = run_cli("ab", "verify", str(artifact), cwd=tmp_path)
    assert verify.returncode == 0 and "VERIFIED" in verify.stdout, verify.stdout
    assert "6 rows resolved" in verify.stdout
    # a ledger row changed after the fact is caught
    ledger.write_text(ledger.read_text().replace('"turns":3', '"turns":4', 1))
    tampered = run_cli("ab", "verify", str(artifact), cwd=tmp_path)
    assert tampered.returncode == 1 and "not found (the row was edited or removed)" in tampered.stdout
    assert_clean(repo, tmp_path / "spawn")


def test_ab_spawn_in_this_process_with_a_fake_agent_and_a_price(tmp_path):
    repo = make_repo(tmp_path / "repo")
    suite = write_suite(tmp_path, repo, adapters=[fake_adapter()], n=3, prompt="ok")
    res = run_cli("ab", "--suite", suite, "--arm-a", "balanced", "--arm-b", "terse", "--executor", "spawn",
                  "--price", "3,15", "--trials", "2", cwd=tmp_path, timeout=300, **spawn_env(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "executor spawn, 2 trial(s), 2 arms" in res.stdout
    assert "agent command ?; models n/a; median turns 2, tool calls 1, diff lines 2" in res.stdout
    assert "VERIFIED" in run_cli("ab", "verify", *[str(p) for p in (tmp_path / ".evalfarm" / "reports" /
                                                                     "eval_ab").glob("*.json")], cwd=tmp_path).stdout
    assert_clean(repo, tmp_path / "spawn")


def test_ab_spawn_refusals_are_one_line(tmp_path):
    repo = make_repo(tmp_path / "repo")
    empty = tmp_path / "no-agents"
    empty.mkdir()
    suite = write_suite(tmp_path, repo)
    base = ("ab", "--suite", suite, "--arm-a", "balanced", "--arm-b", "terse", "--executor", "spawn")
    cases = [
        (base + ("--agent", "claude", "--model", "claude-sonnet-4-5"),
         {"EVALFARM_AGENTS_DIR": str(empty), "PATH": "/usr/bin:/bin"},
         f"--executor spawn: claude: not installed: run `make agents` (npm install --prefix {empty}/claude"),
        (base, {}, "--executor spawn: which agent? pass --agent claude|codex|gemini|aider|opencode"),
        (base + ("--agent", "claude"), {}, "--executor spawn needs --model NAME"),
        (("ab", "--suite", str(tmp_path / "prompts.yaml"), "--arm-a", "balanced", "--arm-b", "terse", "--executor",
          "spawn"), {}, "--executor spawn needs a spawn suite"),
        (("ab", "--suite", suite, "--arm-a", "balanced", "--arm-b", "terse", "--agent", "claude"), {},
         "--agent only applies with --executor spawn"),
    ]
    (tmp_path / "prompts.yaml").write_text("tasks:\n  - {id: a, input: x, expected: y}\n")
    for args, env, message in cases:
        res = run_cli(*args, cwd=tmp_path, **spawn_env(tmp_path), **env)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / ".evalfarm").exists()


def test_ctrl_c_during_an_ab_in_this_process_compares_nothing_and_says_so(tmp_path):
    """The arms' run stops (agents killed, worktrees removed), and the A/B says in one line that nothing was
    compared, exit 130: no artifact from half the arms, no 'the farm returned N results' or KeyError."""
    import signal
    import subprocess
    import time

    from conftest import EVALFARM, env_for
    from spawn_support import wait_for

    repo = make_repo(tmp_path / "repo")
    trace = tmp_path / "trace.log"
    # the fake agent's trace file is outside its worktree: unsandboxed (the sandboxed Ctrl-C is test_spawn_spec's)
    suite = write_suite(tmp_path, repo, adapters=[fake_adapter()], n=2, prompt=f"trace {trace} 60", isolation="none")
    proc = subprocess.Popen([*EVALFARM, "ab", "--suite", suite, "--arm-a", "balanced", "--arm-b", "terse",
                             "--executor", "spawn", "--price", "3,15"], cwd=tmp_path,
                            env=env_for(**spawn_env(tmp_path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for(lambda: trace.exists() and len(trace.read_text().splitlines()) >= 2, 60, "two agents running")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert time.monotonic() - t0 < 10  # not the agents' 60 s
    assert err.strip().splitlines() == [
        "evalfarm: error: interrupted: the calls in flight were cancelled and nothing more was sent; no comparison "
        "was made (the arms were not all run)"], err
    assert not list((tmp_path / ".evalfarm" / "reports" / "eval_ab").glob("*.json"))
    assert_clean(repo, tmp_path / "spawn")


def test_ab_page_opens_two_arms_trajectories_of_one_task_side_by_side(tmp_path):
    """`ab --executor spawn` in this process with a `command:` agent that asks a real mock-provider through
    its task's relay (so each run has a trajectory): the ledger rows carry each run's failure class (a 503
    task is unmeasured in both arms' figures); the dashboard's A/B page lists the tasks the arms failed
    first and links to one page with both arms' trajectories side by side."""
    import re

    from dashboard_support import Serve
    from providers_fixture import MockProviderProc
    from test_agent_failures import AGENT

    server = MockProviderProc()
    try:
        repo = make_repo(tmp_path / "repo")
        suite = {"name": "greet", "repo": str(repo), "base": "main",
                 "adapters": [{"id": "fake", "provider": "agent", "agent": "command", "template": AGENT,
                               "model": "fake-1", "base_url": server.url}],
                 "tasks": [{"id": "good", "prompt": "please edit\nsed -i 's/hello/hello, world/' hello.py",
                            "check": "python3 hello.py | grep -qx 'hello, world'"},
                           {"id": "bad", "prompt": "please do nothing\ntrue",
                            "check": "python3 hello.py | grep -qx 'hello, world'"},
                           {"id": "down", "prompt": "[[status:503]]\ntrue", "check": "true"}]}
        path = tmp_path / "suite.yaml"
        path.write_text(yaml.safe_dump(suite, sort_keys=False))
        state = tmp_path / ".evalfarm"
        res = run_cli("ab", "--suite", str(path), "--arm-a", "balanced", "--arm-b", "terse", "--executor", "spawn",
                      "--price", "3,15", cwd=tmp_path, timeout=300,
                      **spawn_env(tmp_path, EVALFARM_BLOB_DIR=str(state / "blobs")))
        assert res.returncode in (0, 1), res.stderr
        [artifact] = (state / "reports" / "eval_ab").glob("*.json")
        sha = artifact.stem
        # the A/B ledger rows carry each run's failure class: the endpoint's 503 is unmeasured in both arms
        arms_fig = json.loads(artifact.read_text())["arms"]
        assert all(arms_fig[a]["unmeasured_runs"] == {"infra_failed": 1} and arms_fig[a]["coverage"] == pytest.approx(2 / 3)
                   for a in ("balanced", "terse")), arms_fig
        serve = Serve(state)
        try:
            status, _, body = serve.get(f"/ab/{sha}")
            page = body.decode()
            assert status == 200, page[-2000:]
            tasks = re.findall(r'<tr class="ab-task( failed)?" data-task="([^"]+)"', page)
            assert tasks == [(" failed", "bad"), (" failed", "down"), ("", "good")], tasks
            link = re.search(r'<a class="side-link" href="([^"]+)"', page).group(1).replace("&amp;", "&")
            assert "task=bad" in link
            status, _, body = serve.get(link)
            side = body.decode()
            assert status == 200, side[-2000:]
            arms = re.findall(r'<div class="side" data-arm="([^"]+)"><h2>[^<]+<span class="mode">([^<]+)</span>', side)
            assert arms == [("balanced", "agent_failed"), ("terse", "agent_failed")], arms
            assert side.count('data-source="model_call"') == 2 and 'id="trajectory-1"' in side and \
                'id="trajectory-2"' in side
            assert serve.get(f"/ab/{sha}/side?task=nope&trial=0")[0] == 404
        finally:
            serve.stop()
    finally:
        server.stop()
