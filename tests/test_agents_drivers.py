"""Real Claude Code and Codex CLI (the pinned versions `make agents` installs), each editing a file in
a real git worktree through its own tools, against a real `evalfarm mock-provider --agent-script`;
the tokens (and claude's cost) parsed from the agent's own output must equal what the server sent."""
from __future__ import annotations

import json

import pytest

from agents_fixtures import EDIT_SCRIPT, MARK, MODELS, SHELL_SCRIPT, agent_server, make_repo, run_in_sandbox  # noqa: F401
from evalfarm.agents import detect

SONNET_PRICE = (3.0, 15.0)  # USD per million tokens: the price Claude Code applies to claude-sonnet-4-5


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_agent_edits_in_worktree_and_reports_the_tokens_the_server_sent(agent, tmp_path, agent_server):
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    run, edited, status, written = run_in_sandbox(agent, repo, server, tmp_path, addendum=MARK)

    assert edited == 'print("hello, world")\n'
    assert status == " M hello.py\n"  # nothing else in the worktree, not even ignored files
    calls = server.model_calls(grep=MARK)
    assert [c["step"] for c in calls] == [0, 1, 2], calls  # read, edit, say: one model call each
    assert all(c["grep"] for c in calls), "the profile addendum did not reach the model on every call"
    assert all(c["model"] == MODELS[agent] for c in calls)
    usage = run.usage
    assert (usage.input_tokens, usage.output_tokens) == server.sent() == (4500, 90)
    if agent == "claude":
        assert usage.cost_usd == pytest.approx((4500 * SONNET_PRICE[0] + 90 * SONNET_PRICE[1]) / 1e6)
        assert usage.models == ("claude-sonnet-4-5",)
    else:
        assert usage.cost_usd is None  # codex reports no cost: the caller prices it
        assert usage.models == ()  # nor the model it used
    assert (usage.turns, usage.tool_calls, usage.final_message) == (3, 2, "Done: greeting updated.")
    assert run.version == detect(agent)[1] and run.exit_code == 0 and not run.timed_out
    home = {"claude": "home/.claude", "codex": "home/.codex"}[agent]
    assert any(w.startswith(home) for w in written), written  # its state went to the private HOME
    print(f"\nFIGURES {json.dumps({'agent': agent, 'version': run.version, 'wall_s': run.wall_s, 'parsed': [usage.input_tokens, usage.output_tokens, usage.cost_usd], 'sent': server.sent(), 'outside_worktree': written})}")


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_agent_runs_a_scripted_shell_command(agent, tmp_path, agent_server):
    """claude gets --allowedTools for its Bash tool; codex runs the command in its own sandbox."""
    repo = make_repo(tmp_path / "repo")
    server = agent_server(SHELL_SCRIPT)
    extra = ("--allowedTools", "Bash(sed:*)") if agent == "claude" else ()
    run, edited, _, _ = run_in_sandbox(agent, repo, server, tmp_path, extra_args=extra)
    assert edited == 'print("hello, shell")\n'
    assert (run.usage.input_tokens, run.usage.output_tokens) == server.sent() == (1600, 35)
    assert run.usage.tool_calls == 1 and run.usage.final_message == "Done: ran sed."


def test_claude_accept_edits_denies_a_shell_command_that_is_not_an_edit(tmp_path, agent_server):
    """acceptEdits lets `sed -i` through (Claude Code counts it as an edit) but asks approval for other
    commands, which -p cannot give: the tool call fails, the agent carries on. That is the agent's
    outcome, not a runtime error: the run is ok and the file unchanged."""
    repo = make_repo(tmp_path / "repo")
    server = agent_server({"steps": [{"shell": "python3 -c \"open('hello.py', 'w').write('gone')\""},
                                     {"say": "Could not run it."}]})
    run, edited, status, _ = run_in_sandbox("claude", repo, server, tmp_path)
    assert edited == 'print("hello")\n' and status == ""
    assert run.ok and run.usage.tool_calls == 1 and run.usage.final_message == "Could not run it."
    assert (run.usage.input_tokens, run.usage.output_tokens) == server.sent() == (246, 90)
    denied = [json.loads(line) for line in run.stdout_path.read_text().splitlines() if '"tool_result"' in line]
    assert "requires approval" in json.dumps(denied)


@pytest.mark.parametrize("model", ["evalfarm-custom-model", "claude-opus-4-1"])
def test_claude_reports_the_model_it_really_used_and_no_cost_outside_its_price_table(model, tmp_path, agent_server):
    """Claude Code 2.1.197 sends a newer model for a retired id (claude-opus-4-1) without a word, and prices
    a model it does not know at a default: ``models`` must show what went over the wire, and the cost of a
    non-claude model is left to the caller."""
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    MODELS_BACKUP = MODELS["claude"]
    MODELS["claude"] = model
    try:
        run, edited, _, _ = run_in_sandbox("claude", repo, server, tmp_path)
    finally:
        MODELS["claude"] = MODELS_BACKUP
    on_the_wire = tuple(dict.fromkeys(c["model"] for c in server.model_calls()))
    assert run.usage.models == on_the_wire
    if model.startswith("claude-"):
        assert run.usage.cost_usd is not None
    else:
        assert on_the_wire == (model,) and run.usage.cost_usd is None
    print(f"\nFIGURES claude asked for {model}, sent {on_the_wire}, cost {run.usage.cost_usd}")


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_prompt_that_starts_with_a_dash_stays_a_prompt(agent, tmp_path, agent_server):
    repo = make_repo(tmp_path / "repo")
    server = agent_server(EDIT_SCRIPT)
    run, edited, _, _ = run_in_sandbox(agent, repo, server, tmp_path, prompt="--help -v change the greeting")
    assert edited == 'print("hello, world")\n' and run.usage.turns == 3
    first = server.model_calls(grep="--help -v change the greeting")[0]
    assert first["grep"], "the prompt did not reach the model as text"
