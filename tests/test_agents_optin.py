"""Opt-in (`make test-agents`, which installs them): real aider, Gemini CLI and opencode make the
scripted edit in a real worktree against `evalfarm mock-provider`; tokens and cost parsed from each
agent's own report must equal what the server sent (and the price we gave, for the agents that
price from a table we write)."""
from __future__ import annotations

import json

import pytest

from agents_fixtures import EDIT_SCRIPT, MARK, MODELS, OPT_IN, agent_server, installed, make_repo, run_in_sandbox  # noqa: F401
from conftest import run_cli
from evalfarm.agents import Price
from spawn_support import assert_clean, report_of, spawn_env, write_spec

pytestmark = pytest.mark.skipif(not OPT_IN, reason="opt-in: `make test-agents` runs these (installs aider, "
                                                   "gemini, opencode: ~1.1 GB, ~2 min)")
PRICE = Price(input=1.25, output=10.0)  # USD per million tokens


@pytest.mark.parametrize("agent", ["gemini", "opencode", "aider"])
def test_agent_edits_in_worktree_and_reports_the_tokens_the_server_sent(agent, tmp_path, agent_server):
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    extra = ("hello.py",) if agent == "aider" else ()  # aider edits the files it is given
    run, edited, status, written = run_in_sandbox(agent, repo, server, tmp_path, addendum=MARK, price=PRICE,
                                                  extra_args=extra)
    assert edited == 'print("hello, world")\n'
    assert status == " M hello.py\n"
    calls = server.model_calls(grep=MARK)
    assert calls and all(c["grep"] for c in calls), "the profile addendum did not reach the model"
    usage = run.usage
    sent = server.sent()
    assert (usage.input_tokens, usage.output_tokens) == sent
    if agent == "aider":  # no tools: one reply carries the SEARCH/REPLACE block and the closing text
        assert [c["kind"] for c in calls] == ["edit"] and sent == (1500, 60)
        assert (usage.turns, usage.tool_calls) == (1, 1)
        assert usage.final_message.endswith("Done: greeting updated.")
    else:
        assert [c["step"] for c in calls] == [0, 1, 2] and sent == (4500, 90)
        assert (usage.turns, usage.tool_calls, usage.final_message) == (3, 2, "Done: greeting updated.")
    assert usage.models == {"gemini": ("gemini-2.5-pro",), "opencode": (), "aider": ("openai/mock-coder",)}[agent]
    if agent == "gemini":
        assert usage.cost_usd is None  # gemini reports no cost: the caller prices it
    else:
        assert usage.cost_usd == pytest.approx((sent[0] * PRICE.input + sent[1] * PRICE.output) / 1e6)
    print(f"\nFIGURES {json.dumps({'agent': agent, 'version': run.version, 'wall_s': run.wall_s, 'parsed': [usage.input_tokens, usage.output_tokens, usage.cost_usd], 'sent': sent, 'outside_worktree': written})}")


@pytest.mark.parametrize("agent", ["gemini", "opencode"])
def test_agent_without_a_price_leaves_the_cost_to_the_caller(agent, tmp_path, agent_server):
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    run, edited, _, _ = run_in_sandbox(agent, repo, server, tmp_path)
    assert edited == 'print("hello, world")\n'
    assert run.usage.cost_usd is None and (run.usage.input_tokens, run.usage.output_tokens) == server.sent()


SEALED_KEYS = {"gemini": "GEMINI_API_KEY", "opencode": "OPENAI_API_KEY", "aider": "OPENAI_API_KEY"}


@pytest.mark.parametrize("agent", ["gemini", "opencode", "aider"])
def test_agent_in_the_sandbox_reaches_the_model_only_through_the_relay(agent, tmp_path, agent_server):
    """`isolation: sandbox` (the default) on a spec run: the agent edits in its jail, its one address is
    the task's relay, the server sees the real key and the relay counted on the wire what the server sent
    (opencode's side request for a session title too, which opencode leaves out of its own account)."""
    installed(agent)
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    real_key = f"sk-real-{agent}-0123456789abcdef"
    adapter = {"id": agent, "provider": "agent", "agent": agent, "model": MODELS[agent], "base_url": server.url,
               "price": {"input": PRICE.input, "output": PRICE.output}}
    if agent == "aider":
        adapter["args"] = ["hello.py"]  # aider edits the files it is given
    spec = write_spec(tmp_path / f"{agent}.yaml", repo, [
        {"id": "greeting", "text": "Change the greeting in hello.py to hello, world",
         "check": "python3 hello.py | grep -qx 'hello, world'"}], adapters=[adapter])
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=300,
                  **spawn_env(tmp_path), **{SEALED_KEYS[agent]: real_key})
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    [out] = report_of(res)["outcomes"]
    assert out["error"] is None and out["passed"] is True, out
    info = out["agent"]
    assert info["isolation"] == "sandbox"
    sent = server.sent()
    assert (out["input_tokens"], out["output_tokens"]) == sent
    relay = info["relay"]
    side = server.side_tokens()
    assert (relay["input_tokens"], relay["output_tokens"]) == (sent[0] + side[0], sent[1] + side[1]), (relay, side)
    assert relay["matches_agent"] is (side == (0, 0)) and relay["refused"] == 0, relay
    keys = {e.get("key") for e in server.model_calls()}
    assert keys == {real_key}, keys  # the agent held only its per-task token
    assert_clean(repo, tmp_path / "spawn")
    print(f"\nSEALED {json.dumps({'agent': agent, 'wall_s': info['wall_s'], 'tokens': sent, 'side': side, 'relay': relay})}")
