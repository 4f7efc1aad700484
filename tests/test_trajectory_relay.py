"""The model relay's record as a trajectory's second source (agents/model_relay.py, agents/trajectory.py):
`command:` agents (tests/agent_failclass.py) run sealed by `evalfarm run` against a real mock-provider,
each asking the model once through its task's relay. One claims in its usage file two model calls and
tokens the server never sent: its trajectory is marked mismatched, and the report (JSON, Markdown) and
the case page say so. One prints nothing readable: its trajectory comes from the relay alone (the model
call with the server's tokens and the reply's text), with a key-shaped string of the reply masked."""
from __future__ import annotations

import json

from conftest import run_cli
from dashboard_support import Serve
from spawn_support import make_repo, report_of, spawn_env, write_spec
from test_agent_failures import AGENT

KEYLIKE = "sk-live-abcdefghijklmnop0123"
LIAR = '{"input_tokens": 99999, "output_tokens": 7, "turns": 2}'


def test_relay_record_marks_a_lying_agent_and_stands_in_for_a_mute_one(tmp_path):
    from providers_fixture import MockProviderProc

    server = MockProviderProc()
    try:
        repo = make_repo(tmp_path / "repo")
        adapter = {"id": "fake", "provider": "agent", "agent": "command", "template": AGENT, "model": "fake-1",
                   "base_url": server.url}
        spec = write_spec(tmp_path / "relay.yaml", repo, [
            {"id": "liar", "text": f"count these words please\necho '{LIAR}' > \"$EVALFARM_USAGE_FILE\"",
             "check": "true"},
            {"id": "mute", "text": f"say {KEYLIKE} back\necho not-json-at-all", "check": "true"}],
            adapters=[adapter])
        state = tmp_path / "state"
        env = {**spawn_env(tmp_path), "EVALFARM_BLOB_DIR": str(state / "blobs")}
        res = run_cli("run", str(spec), "--json", "--state-dir", str(state), cwd=tmp_path, timeout=120, **env)
        report = report_of(res)
        by = {o["prompt_id"]: o for o in report["outcomes"]}
        blobs = state / "blobs"

        liar = by["liar"]["agent"]
        assert liar["relay"]["requests"] == 1, liar["relay"]
        assert liar["trajectory_mismatch"] == (
            "the agent reported 2 model calls, the relay forwarded 1; the agent reported 99999/7 tokens in/out, "
            f"the relay counted {liar['relay']['input_tokens']}/{liar['relay']['output_tokens']}")
        traj = json.loads((blobs / f"{liar['trajectory_sha256']}.trajectory.json").read_text())
        assert traj["agreement"]["mismatched"] is True and traj["sources"] == ["relay"]
        fig = report["per_adapter"]["fake"]
        assert fig["trajectory_mismatches"] == 1
        assert [m["prompt_id"] for m in fig["trajectory_mismatch_examples"]] == ["liar"]

        mute = by["mute"]["agent"]
        assert "trajectory_mismatch" not in mute and mute["trajectory_sources"] == ["relay"]
        raw = (blobs / f"{mute['trajectory_sha256']}.trajectory.json").read_text()
        assert KEYLIKE not in raw
        steps = json.loads(raw)["steps"]
        assert [s["source"] for s in steps] == ["model_call", "agent"]
        assert steps[0]["seen_by"] == ["relay"] and steps[0]["status"] == 200 and steps[0]["latency_ms"] > 0
        assert (steps[0]["input_tokens"], steps[0]["output_tokens"]) == (mute["relay"]["input_tokens"],
                                                                       mute["relay"]["output_tokens"]) != (0, 0)
        assert steps[0]["model"] == "fake-1" and "say *** back" in steps[1]["text"]

        from evalfarm.core.report.markdown import render_markdown

        md = render_markdown(report)
        assert "- fake: 1 trajectories MISMATCHED" in md and "  - liar (trial 0): the agent reported 2 model calls" in md

        serve = Serve(state)
        try:
            index = next(i for i, o in enumerate(report["outcomes"]) if o["prompt_id"] == "liar")
            status, _, body = serve.get(f"/runs/{report['run_id']}/cases/{index}")
            page = body.decode()
            assert status == 200 and 'id="trajectory-mismatch">MISMATCH: the agent reported 2 model calls' in page
            assert "sources: relay" in page and 'data-only="relay"' in page
        finally:
            serve.stop()
    finally:
        server.stop()
