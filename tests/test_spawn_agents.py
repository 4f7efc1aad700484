"""Real Claude Code and Codex CLI as adapters of a spec (`provider: agent`), in this process and on the
Redis farm with a spawn worker, each making a scripted edit against a real `evalfarm mock-provider
--agent-script`: the check passes, and the tokens (and cost) parsed from each agent's own output
equal what the server sent. Then `isolation: netns`: the agents still work, and another port on the
host is unreachable from inside (a fake agent probes it; without netns the same probe reaches it)."""
from __future__ import annotations

import json
import socket

import pytest

from agents_fixtures import EDIT_SCRIPT, MODELS, agent_server, git_dir_state, installed  # noqa: F401 (fixture)
from conftest import free_port, run_cli
from spawn_support import FAKE_TEMPLATE, assert_clean, make_repo, report_of, spawn_env, write_spec

KEYS = {"ANTHROPIC_API_KEY": "sk-test-anthropic-0123456789", "OPENAI_API_KEY": "sk-test-openai-0123456789"}
PRICE = {"claude": None, "codex": {"input": 1.25, "output": 10.0}}  # claude prices itself; codex does not


def agent_spec(tmp_path, repo, agent: str, url: str, **workspace):
    adapter = {"id": agent, "provider": "agent", "agent": agent, "model": MODELS[agent], "base_url": url}
    if PRICE[agent]:
        adapter["price"] = PRICE[agent]
    return write_spec(tmp_path / f"{agent}.yaml", repo, [
        {"id": "greeting", "text": "Change the greeting in hello.py to hello, world",
         "check": "python3 hello.py | grep -qx 'hello, world'"}], adapters=[adapter], **workspace)


def check_run(report: dict, agent: str, server, since: int) -> dict:
    """The one outcome passed, with tokens parsed from the agent = tokens the server sent for it."""
    [out] = report["outcomes"]
    assert out["error"] is None and out["passed"] is True, out
    calls = [e for e in server.model_calls() if e["seq"] >= since and e["model"] == MODELS[agent]]
    sent_in, sent_out = sum(e["usage"]["input_tokens"] for e in calls), sum(e["usage"]["output_tokens"] for e in calls)
    assert (out["input_tokens"], out["output_tokens"]) == (sent_in, sent_out) == (4500, 90)
    info = out["agent"]
    assert info["agent"] == agent and info["version"] == installed(agent)[1]
    assert (info["turns"], info["tool_calls"]) == (3, 2)
    assert info["diff"]["files"] == 1 and (info["diff"]["insertions"], info["diff"]["deletions"]) == (1, 1)
    assert info["check"]["exit_code"] == 0
    if agent == "claude":  # Claude Code's own price for claude-sonnet-4-5: $3 / $15 per million
        assert info["cost_source"] == "agent" and out["cost_usd"] == pytest.approx(4500 * 3e-6 + 90 * 15e-6)
        assert info["models"] == [MODELS[agent]] and info["model_pin_ok"] is True
    else:  # codex reports no cost: priced from the adapter's price
        assert info["cost_source"] == "price" and out["cost_usd"] == pytest.approx((4500 * 1.25 + 90 * 10) / 1e6)
    relay = info.get("relay")
    if info["isolation"] == "sandbox":  # the relay counted on the wire what the server sent
        assert (relay["input_tokens"], relay["output_tokens"]) == (sent_in, sent_out) and relay["matches_agent"], relay
    print(f"{agent} {info['version']}: wall {info['wall_s']:.2f} s per task ({info['isolation']}), tokens parsed "
          f"{out['input_tokens']}/{out['output_tokens']} = sent {sent_in}/{sent_out} = relay "
          f"{relay and (relay['input_tokens'], relay['output_tokens'])}, cost {out['cost_usd']:.6f} USD "
          f"({info['cost_source']})")
    return out


def last_seq(server) -> int:
    log = server.log()
    return log[-1]["seq"] + 1 if log else 0


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_real_agent_in_a_spec_run_in_process_and_on_the_farm(tmp_path, agent, agent_server, redis_server,
                                                            start_worker):
    installed(agent)
    repo = make_repo(tmp_path / "repo")
    before = git_dir_state(repo)
    server = agent_server(EDIT_SCRIPT)
    spec = agent_spec(tmp_path, repo, agent, server.url)
    env = {**spawn_env(tmp_path), **KEYS}
    since = last_seq(server)
    local = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=300, **env)
    assert local.returncode == 0, local.stderr
    check_run(report_of(local), agent, server, since)
    # the same spec on the farm: the agent item goes to the spawn queue and runs on the spawn worker
    start_worker(redis_server.url, pool="aggregate", concurrency=1, **env)
    start_worker(redis_server.url, pool="spawn", concurrency=1, **env)
    since = last_seq(server)
    farm = run_cli("run", str(spec), "--json", "--no-save", broker=redis_server.url, cwd=tmp_path, timeout=300, **env)
    assert farm.returncode == 0, farm.stderr + farm.stdout[-3000:]
    out = check_run(report_of(farm), agent, server, since)
    assert report_of(farm)["mode"] == "redis" and out["key"] == report_of(local)["outcomes"][0]["key"]
    assert git_dir_state(repo) == before  # the shared .git is as it was (the worktrees' admin dirs are gone)
    assert_clean(repo, tmp_path / "spawn")


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_real_agent_in_a_network_namespace(tmp_path, agent, agent_server):
    installed(agent)
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    spec = agent_spec(tmp_path, repo, agent, server.url, isolation="netns")  # the old name of sandbox
    since = last_seq(server)
    res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=300, **spawn_env(tmp_path), **KEYS)
    assert res.returncode == 0, res.stderr
    out = check_run(report_of(res), agent, server, since)
    assert out["agent"]["isolation"] == "sandbox"
    assert_clean(repo, tmp_path / "spawn")


def test_netns_reaches_the_model_port_and_nothing_else(tmp_path, agent_server):
    """A fake agent probes from inside: the model endpoint answers (through the relay), a port that
    listens on the host's loopback is refused, an outside address is unreachable, DNS fails. The
    same probe without netns reaches that port: the test can tell the difference."""
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    other = free_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", other))
    listener.listen(8)
    try:
        results = {}
        for isolation in ("none", "sandbox"):
            spec = write_spec(tmp_path / f"{isolation}.yaml", repo, [
                {"id": "probe", "text": f"netprobe {server.url}/models {other}", "check": "true"}],
                adapters=[{"id": "fake", "provider": "agent", "agent": "command", "template": FAKE_TEMPLATE,
                           "model": "fake-1", "base_url": server.url}], isolation=isolation)
            res = run_cli("run", str(spec), "--json", "--no-save", cwd=tmp_path, timeout=120, **spawn_env(tmp_path))
            assert res.returncode == 0, res.stderr
            [out] = report_of(res)["outcomes"]
            assert out["passed"] is True, out
            results[isolation] = json.loads(out["output"])
    finally:
        listener.close()
    assert results["none"]["model"] == 200 and results["none"]["other_port"] == "connected"
    inside = results["sandbox"]
    assert inside["model"] == 200  # the model endpoint, through the relay
    assert inside["other_port"].startswith("ConnectionRefusedError")  # the host's loopback is not this one
    assert inside["outside"].startswith("OSError: [Errno 101] Network is unreachable")
    assert "gaierror" in inside["dns"]
    assert_clean(repo, tmp_path / "spawn")

