"""The dashboard's case page of a real Claude Code task (30 scripted model turns against `evalfarm
mock-provider --agent-script`) shows its trajectory as a timeline in the real browser: the steps in
order with the server's tokens per model reply, tool calls with their arguments, results folded; a
`<script>` the agent read from the repo shows as text and never runs."""
from __future__ import annotations

import re

import pytest

from agents_fixtures import MODELS, agent_server, git, installed  # noqa: F401 (fixture)
from conftest import run_cli
from dashboard_support import Serve, browser, page, shot  # noqa: F401 (fixtures)
from spawn_support import make_repo, report_of, spawn_env, write_spec

READS = 28
SCRIPT = {"steps": [{"read": "hello.py", "usage": {"input_tokens": 1000 + 10 * i, "output_tokens": 5}}
                    for i in range(READS)] + [
    {"edit": {"file": "hello.py", "old": 'print("hello")', "new": 'print("hello, world")'},
     "usage": {"input_tokens": 3000, "output_tokens": 60}},
    {"say": "Done: greeting updated.", "usage": {"input_tokens": 3100, "output_tokens": 10}}]}
XSS = "<script>window.__pwned = 1; alert('trajectory')</script>"


def test_case_page_shows_the_trajectory_timeline_and_no_script_runs(tmp_path, agent_server, page):
    installed("claude")
    server = agent_server(SCRIPT)
    repo = make_repo(tmp_path / "repo")
    (repo / "hello.py").write_text(f'print("hello")\n# {XSS}\n')
    git(repo, "commit", "-qam", "markup in the repo")
    adapter = {"id": "claude", "provider": "agent", "agent": "claude", "model": MODELS["claude"],
               "base_url": server.url}
    spec = write_spec(tmp_path / "c.yaml", repo, [{"id": "greeting", "text": "Change the greeting in hello.py",
                                                   "check": "grep -q 'hello, world' hello.py"}], adapters=[adapter])
    state = tmp_path / "state"
    env = {**spawn_env(tmp_path), "EVALFARM_BLOB_DIR": str(state / "blobs"),
           "ANTHROPIC_API_KEY": "sk-test-anthropic-0123456789"}
    report = report_of(run_cli("run", str(spec), "--json", "--state-dir", str(state), cwd=tmp_path, timeout=300,
                               **env))
    [out] = report["outcomes"]
    assert out["failure_class"] == "passed", out
    size = (state / "blobs" / f"{out['agent']['trajectory_sha256']}.trajectory.json").stat().st_size
    serve = Serve(state)
    try:
        page.goto(f"{serve.url}/runs/{report['run_id']}/cases/0")
        steps = page.locator("#trajectory li.step")
        sources = [steps.nth(i).get_attribute("data-source") for i in range(steps.count())]
        assert sources[:6] == ["model_call", "tool_call", "tool_result"] * 2
        assert sources.count("model_call") == READS + 2 and sources[-1] == "agent"
        calls = page.locator("#trajectory li.step-model_call .tokens")
        shown = [int(re.search(r"([\d,]+) tokens in", calls.nth(i).inner_text()).group(1).replace(",", ""))
                 for i in range(calls.count())]
        sent = [e["usage"]["input_tokens"] for e in server.model_calls() if e["model"] == MODELS["claude"]]
        assert shown == sent == [1000 + 10 * i for i in range(READS)] + [3000, 3100]
        names = page.locator("#trajectory .tool-name")
        assert [names.nth(i).inner_text() for i in range(names.count())] == ["Read"] * READS + ["Edit"]
        first = page.locator("#trajectory details.tool-result").first
        assert not first.locator("pre").is_visible()  # folded
        first.locator("summary").click()
        assert XSS in first.locator("pre").inner_text()  # the markup, as text
        assert page.evaluate("window.__pwned") is None and page.dialogs == [] and page.errors == []
        shot(page, "agent-trajectory")
        started = __import__("time").perf_counter()
        status, _, body = serve.get(f"/runs/{report['run_id']}/cases/0")
        ms = (__import__("time").perf_counter() - started) * 1000
        assert status == 200 and b"&lt;script&gt;window.__pwned" in body and b"<script>window.__pwned" not in body
    finally:
        serve.stop()
    print(f"\n30-turn Claude Code task: {len(sources)} trajectory steps, {size} bytes stored; case page {ms:.0f} ms")
