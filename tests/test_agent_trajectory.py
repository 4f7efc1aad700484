"""One trajectory per agent task (agents/trajectory.py), from the real Claude Code and Codex CLI run by
`evalfarm run` against the scripted `evalfarm mock-provider --agent-script`: the stored file (content-
addressed, linked from the item's agent record) holds the scripted read and edit steps in order with the
tokens the server sent, and a secret the agent read from the repo is masked in it."""
from __future__ import annotations

import json

import jsonschema
import pytest

from agents_fixtures import EDIT_SCRIPT, MODELS, agent_server, git, installed  # noqa: F401 (fixture)
from conftest import ROOT, run_cli
from spawn_support import make_repo, report_of, spawn_env, write_spec

ATIF_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "atif-v1.4.json").read_text())
KEYS = {"ANTHROPIC_API_KEY": "sk-test-anthropic-0123456789", "OPENAI_API_KEY": "sk-test-openai-0123456789"}
SECRET = "tok-7f3a-this-is-a-deploy-secret"  # in the repo and in the evalfarm process's EVALFARM_DEPLOY_TOKEN
KEYLIKE = "sk-live-abcdefghijklmnop0123"  # key-shaped, in no variable


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_real_agent_trajectory_has_the_scripted_steps_and_no_secret(tmp_path, agent, agent_server):
    installed(agent)
    server = agent_server(EDIT_SCRIPT)
    repo = make_repo(tmp_path / "repo")
    (repo / "hello.py").write_text(f'print("hello")\n# deploy: {SECRET} {KEYLIKE}\n')
    git(repo, "commit", "-qam", "a secret in the repo")
    adapter = {"id": agent, "provider": "agent", "agent": agent, "model": MODELS[agent], "base_url": server.url,
               "price": {"input": 1.0, "output": 2.0}}
    spec = write_spec(tmp_path / f"{agent}.yaml", repo, [
        {"id": "greeting", "text": "Change the greeting in hello.py to hello, world",
         "check": "grep -q 'hello, world' hello.py"}], adapters=[adapter])
    env = {"EVALFARM_DEPLOY_TOKEN": SECRET, **spawn_env(tmp_path), **KEYS}
    res = run_cli("run", str(spec), "--json", "--state-dir", str(tmp_path / "state"), cwd=tmp_path, timeout=300,
                  **env)
    report = report_of(res)
    [out] = report["outcomes"]
    assert out["failure_class"] == "passed", out
    sha = out["agent"]["trajectory_sha256"]
    raw = (tmp_path / "blobs" / f"{sha}.trajectory.json").read_bytes()
    assert SECRET not in raw.decode() and KEYLIKE not in raw.decode()
    traj = json.loads(raw)
    steps = traj["steps"]
    assert out["agent"]["trajectory_steps"] == len(steps) and [s["index"] for s in steps] == list(range(len(steps)))
    tools = [s for s in steps if s["source"] == "tool_call"]
    results = {s["tool_call_id"]: s for s in steps if s["source"] == "tool_result"}
    calls = [e for e in server.model_calls() if e["model"] == MODELS[agent]]
    models = [s for s in steps if s["source"] == "model_call"]
    # the relay's record is the second source: both accounts agree (calls and tokens), nothing marked
    assert traj["sources"] == ["agent", "relay"] and traj["agreement"]["mismatched"] is False, traj["agreement"]
    assert traj["agreement"]["relay_tokens"] == [4500, 90] and "trajectory_mismatch" not in out["agent"]
    if agent == "claude":
        assert [t["name"] for t in tools] == ["Read", "Edit"]
        assert tools[1]["arguments"]["new_string"] == 'print("hello, world")'
        # each model reply's input tokens are the ones the server sent for that request, in order, seen by both
        assert [m["input_tokens"] for m in models] == [e["usage"]["input_tokens"] for e in calls] == [1000, 1500, 2000]
        assert [m["relay"]["input_tokens"] for m in models] == [1000, 1500, 2000]
        assert all(m["seen_by"] == ["agent", "relay"] and m["latency_ms"] > 0 for m in models)
        assert traj["agreement"]["agent_model_calls"] == traj["agreement"]["relay_model_calls"] == 3
    else:  # codex reports one usage per turn: the relay's calls are the per-request steps, before the turn's sum
        assert [t["name"] for t in tools] == ["exec", "apply_patch"] and "hello.py" in tools[0]["arguments"]["command"]
        assert [(m["input_tokens"], m["output_tokens"], m.get("seen_by")) for m in models] == [
            (e["usage"]["input_tokens"], e["usage"]["output_tokens"], ["relay"]) for e in calls] + [
            (sum(e["usage"]["input_tokens"] for e in calls), sum(e["usage"]["output_tokens"] for e in calls), None)]
        assert models[-1]["scope"] == "turn" and len(calls) == 3
    read = results[tools[0]["tool_call_id"]]["content"]
    assert "print(\"hello\")" in read and "# deploy: *** ***" in read  # masked, the rest kept
    assert steps.index(tools[0]) < steps.index(results[tools[0]["tool_call_id"]]) < steps.index(tools[1])
    assert steps[-1]["source"] in ("agent", "model_call")
    assert any(s["source"] == "agent" and s["text"] == "Done: greeting updated." for s in steps)
    assert (traj["totals"]["input_tokens"], traj["totals"]["output_tokens"]) == (4500, 90)
    print(f"{agent}: {len(steps)} steps, {len(raw)} bytes")

    # the same item exported as Harbor's ATIF, valid against the RFC's schema (tests/schemas/atif-v1.4.json)
    exp = run_cli("export", "trajectory", report["run_id"], "-o", str(tmp_path / "atif"), "--state-dir",
                  str(tmp_path / "state"), cwd=tmp_path, **env)
    assert exp.returncode == 0, exp.stderr
    [doc_path] = (tmp_path / "atif").iterdir()
    doc = json.loads(doc_path.read_text())
    jsonschema.Draft202012Validator(ATIF_SCHEMA).validate(doc)
    assert SECRET not in doc_path.read_text()
    names = [c["function_name"] for st in doc["steps"] for c in st.get("tool_calls", [])]
    assert names == [t["name"] for t in tools] and doc["steps"][0]["source"] == "user"
    ids = [c["tool_call_id"] for st in doc["steps"] for c in st.get("tool_calls", [])]
    assert ids == [r["source_call_id"] for st in doc["steps"] for r in st.get("observation", {}).get("results", [])]
    assert doc["final_metrics"]["total_prompt_tokens"] == 4500 and doc["extra"]["failure_class"] == "passed"
    if agent == "claude":
        assert [st["metrics"]["prompt_tokens"] for st in doc["steps"][1:]] == [1000, 1500, 2000]

    # and as Inspect events in `export inspect`, loaded by Inspect's own reader
    from inspect_ai.event import ModelEvent, ToolEvent
    from inspect_ai.log import read_eval_log

    log_path = tmp_path / "inspect.json"
    exp = run_cli("export", "inspect", report["run_id"], "-o", str(log_path), "--state-dir", str(tmp_path / "state"),
                  cwd=tmp_path, **env)
    assert exp.returncode == 0, exp.stderr
    assert SECRET not in log_path.read_text()
    [sample] = read_eval_log(str(log_path)).samples
    model_events = [e for e in sample.events if isinstance(e, ModelEvent)]
    tool_events = [e for e in sample.events if isinstance(e, ToolEvent)]
    assert [e.function for e in tool_events] == [t["name"] for t in tools]
    assert "print(\"hello\")" in str(tool_events[0].result) and tool_events[1].error is None
    assert [e.output.usage.input_tokens for e in model_events] == [1000, 1500, 2000]
    called = [c.function for e in model_events for c in (e.output.choices[0].message.tool_calls or [])]
    assert called == [t["name"] for t in tools]
    assert sample.events.index(tool_events[0]) < sample.events.index(tool_events[1])
    assert sample.metadata["trajectory"]["sources"] == ["agent", "relay"]

    bad = run_cli("export", "trajectory", report["run_id"], "--item", "zzzz", "-o", str(tmp_path / "x"),
                  "--state-dir", str(tmp_path / "state"), cwd=tmp_path, **env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not (tmp_path / "x").exists(), bad.stderr
