"""One scripted edit, the same file with every agent: the real Claude Code (its Edit tool) and the real
Codex CLI (apply_patch) play `mock-provider --agent-script` edits whose `old` text sits inside indented
lines, or is a part of a line. Before, Codex's apply_patch replaced the whole line with the unindented
`new` text (an IndentationError) while Claude Code's Edit kept the indentation: an agent A/B run on
such a script would have measured the mock, not the agents."""
from __future__ import annotations

import pytest

from agents_fixtures import MODELS, agent_server, git, installed, make_repo  # noqa: F401
from evalfarm.agents import AgentRequest, get_driver, run_agent, sandbox

INDENTED = "def sub(a, b):\n    return a - b  # sub\n\n\ndef double(x):\n    if x:\n        return x * 2\n    return 0\n"
EDITED = "def sub(a, b):\n    return a + b  # sub\n\n\ndef double(x):\n    if x:\n        return x * 3\n    return 0\n"
SCRIPT = {"steps": [
    {"read": "calc.py"},
    {"edit": {"file": "calc.py", "old": "return a - b", "new": "return a + b"}},  # the indented line's text
    {"edit": {"file": "calc.py", "old": "x * 2", "new": "x * 3"}},  # a part of a doubly indented line
    {"say": "Done: calc fixed."},
]}


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_an_indented_scripted_edit_gives_the_same_file_with_every_agent(agent, tmp_path, agent_server):
    binary, version = installed(agent)
    repo = make_repo(tmp_path / "repo")
    (repo / "calc.py").write_text(INDENTED)
    git(repo, "add", "calc.py")
    git(repo, "commit", "-qm", "calc")
    server = agent_server(SCRIPT)
    driver = get_driver(agent)
    req = AgentRequest("Fix calc.py", MODELS[agent], server.url, extra_env={driver.key_env: "sk-test-0123456789abcdef"})
    with sandbox(repo, "main", parent=tmp_path / "spawn") as box:
        run = run_agent(driver, req, box.worktree, box.scratch, timeout_s=180, binary=binary, version=version,
                        out_dir=tmp_path / "out")
        assert run.ok, f"{run.error}\n{run.stderr_path.read_text()[-3000:]}"
        edited = (box.worktree / "calc.py").read_text()
    assert [c["step"] for c in server.model_calls()] == [0, 1, 2, 3]
    assert run.usage.tool_calls == 3 and run.usage.final_message == "Done: calc fixed."
    assert edited == EDITED
    compile(edited, "calc.py", "exec")
    if agent == "codex":  # through Codex's own edit tool (the patch is in the history it sends back), not its shell
        assert any(c["grep"] for c in server.model_calls(grep="*** Update File: calc.py"))
        assert not any(c["grep"] for c in server.model_calls(grep="t.count(sys.argv[2])"))
