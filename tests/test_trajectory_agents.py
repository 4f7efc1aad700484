"""Trajectories of the other agents (agents/trajectory.py): real opencode, Gemini CLI and aider run sealed by
`evalfarm run` against the scripted `evalfarm mock-provider --agent-script`, through the task's model relay.
opencode's JSON events give its steps (tool calls with their input and output, tokens and cost per model
call; its title request, which it does not report, is a step the relay alone saw); Gemini CLI prints only a final report, so its model calls and the tool calls the model asked for
come from the relay's record; aider's chat history and analytics log give its reply, its edit and the
call's tokens. Each agent's account agrees with the relay's (calls and tokens), nothing marked."""
from __future__ import annotations

import json

import pytest

from agents_fixtures import EDIT_SCRIPT, MODELS, agent_server, installed  # noqa: F401 (fixture)
from conftest import run_cli
from spawn_support import make_repo, report_of, spawn_env, write_spec

KEYS = {"OPENAI_API_KEY": "sk-test-openai-0123456789", "GEMINI_API_KEY": "test-gemini-0123456789"}


@pytest.mark.parametrize("agent", ["opencode", "gemini", "aider"])
def test_other_agents_get_a_trajectory_that_agrees_with_the_relay(tmp_path, agent, agent_server):
    installed(agent)
    server = agent_server(EDIT_SCRIPT)
    repo = make_repo(tmp_path / "repo")
    adapter = {"id": agent, "provider": "agent", "agent": agent, "model": MODELS[agent], "base_url": server.url,
               "price": {"input": 1.0, "output": 2.0}, **({"args": ["hello.py"]} if agent == "aider" else {})}
    spec = write_spec(tmp_path / f"{agent}.yaml", repo, [
        {"id": "greeting", "text": "Change the greeting in hello.py to hello, world",
         "check": "grep -q 'hello, world' hello.py"}], adapters=[adapter])
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=300, **spawn_env(tmp_path), **KEYS)
    [out] = report_of(res)["outcomes"]
    assert out["failure_class"] == "passed", out
    raw = (tmp_path / "blobs" / f"{out['agent']['trajectory_sha256']}.trajectory.json").read_bytes()
    traj = json.loads(raw)
    steps = traj["steps"]
    assert traj["agreement"]["mismatched"] is False and "trajectory_mismatch" not in out["agent"], traj["agreement"]
    calls = [s for s in steps if s["source"] == "model_call"]
    tools = [s for s in steps if s["source"] == "tool_call"]
    sent = [(e["usage"]["input_tokens"], e["usage"]["output_tokens"]) for e in server.model_calls()]
    side = [c for c in calls if c["seen_by"] == ["relay"] and agent != "gemini"]  # a call the agent did not report
    calls = [c for c in calls if c not in side]
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == sent
    assert traj["agreement"]["unreported_calls"] == len(side) == (1 if agent == "opencode" else 0)
    assert all(c["latency_ms"] is not None for c in calls)
    if agent == "opencode":
        assert traj["sources"] == ["agent", "relay"] and all(c["seen_by"] == ["agent", "relay"] for c in calls)
        assert [t["name"] for t in tools] == ["read", "edit"] and tools[1]["arguments"]["newString"] == \
            'print("hello, world")'
        results = [s for s in steps if s["source"] == "tool_result"]
        assert "print(\"hello\")" in results[0]["content"] and results[1]["content"] == "Edit applied successfully."
        assert [c["cost_usd"] for c in calls] == [pytest.approx((i + 2 * o) / 1e6) for i, o in sent]
        assert [s["source"] for s in steps if s not in side][:3] == ["model_call", "tool_call", "tool_result"]
    elif agent == "gemini":  # its own report has only the answer: the relay gives the calls and the tool calls
        assert traj["sources"] == ["agent", "relay"] and all(c["seen_by"] == ["relay"] for c in calls)
        assert [t["name"] for t in tools] == ["read_file", "replace"]
        assert traj["agreement"]["agent_model_calls"] == traj["agreement"]["relay_model_calls"] == 3
        assert steps[-1]["source"] == "agent" and steps[-1]["text"] == "Done: greeting updated."
    else:  # aider: one reply carrying the SEARCH/REPLACE block, applied by aider
        assert sent == [(1500, 60)] and calls[0]["seen_by"] == ["agent", "relay"]
        assert [t["name"] for t in tools] == ["apply_edit"] and tools[0]["arguments"] == {"file": "hello.py"}
        reply = next(s for s in steps if s["source"] == "agent")
        assert "<<<<<<< SEARCH" in reply["text"] and reply["text"].endswith("Done: greeting updated.")
    print(f"{agent}: {len(steps)} steps, {len(raw)} bytes")
