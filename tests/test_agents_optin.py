"""Opt-in (`make test-agents`, which installs them): real aider, Gemini CLI and opencode make the
scripted edit in a real worktree against `evalfarm mock-provider`; tokens and cost parsed from each
agent's own report must equal what the server sent (and the price we gave, for the agents that
price from a table we write)."""
from __future__ import annotations

import json

import pytest

from agents_fixtures import EDIT_SCRIPT, MARK, OPT_IN, agent_server, make_repo, run_in_sandbox  # noqa: F401
from evalfarm.agents import Price

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
