"""The runner against misbehaving agents (a fake agent, tests/agent_fake.py, run as a real process
through the `command` driver, and fake binaries in place of the real CLIs): hangs are killed with
their children, failures become a one-line runtime error, writes outside the worktree land in the
scratch HOME, and only allow-listed variables reach the agent."""
from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from agents_fixtures import git, make_repo
from evalfarm.agents import (AgentNotInstalled, AgentRequest, AgentSetupError, Scratch, get_driver, resolve,
                             run_agent, sandbox)
from evalfarm.agents.runner import group_members

FAKE = Path(__file__).with_name("agent_fake.py")


def fake(mode: str, *args: str):
    return get_driver("command", f"{sys.executable} {FAKE} {mode} {{usage_file}} " + " ".join(args))


def run_fake(tmp_path: Path, mode: str, *args: str, timeout_s: float = 30, **request):
    workdir = tmp_path / "wd"
    workdir.mkdir(exist_ok=True)
    (workdir / "hello.py").write_text('print("hello")\n')
    driver = fake(mode, *args)
    return run_agent(driver, AgentRequest("do it", "m", **request), workdir, Scratch(tmp_path / "scratch"),
                     timeout_s=timeout_s, out_dir=tmp_path / "out")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_fake_agent_that_works_reports_its_usage_file(tmp_path):
    run = run_fake(tmp_path, "ok")
    assert run.ok and run.exit_code == 0
    assert run.usage.as_dict() == {"input_tokens": 321, "output_tokens": 54, "cost_usd": 0.0042, "turns": 2,
                                   "tool_calls": 1, "final_message": "fake done", "cached_input_tokens": 0,
                                   "error": None, "models": []}
    assert (tmp_path / "wd" / "hello.py").read_text() == 'print("hello, world")\n'


@pytest.mark.parametrize("stubborn", [False, True], ids=["sigterm", "ignores-sigterm"])
def test_a_hanging_agent_is_killed_with_its_children_at_the_timeout(tmp_path, stubborn):
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    run = run_fake(tmp_path, "hang", str(pids), *(["stubborn"] if stubborn else []), timeout_s=2)
    took = time.monotonic() - t0
    assert run.timed_out and not run.ok
    assert run.error == "command: timed out after 2 s (process group killed)"
    assert run.exit_code == (-signal.SIGKILL if stubborn else -signal.SIGTERM)
    assert 2 <= took < (2 + 2 + 3)  # the timeout, the SIGTERM grace when ignored, slack
    agent, child = (int(x) for x in pids.read_text().split())
    grandchild = int(Path(str(pids) + ".grandchild").read_text())
    assert not any(alive(p) for p in (agent, child, grandchild)), "a process of the agent outlived it"
    assert group_members(agent) == []


def test_a_child_left_running_by_an_agent_that_exited_is_killed(tmp_path):
    pid_file = tmp_path / "orphan"
    run = run_fake(tmp_path, "orphan", str(pid_file))
    assert run.ok and run.exit_code == 0 and run.leftovers_killed == 1
    assert not alive(int(pid_file.read_text()))


def test_a_non_zero_exit_is_a_runtime_error_with_the_last_stderr_line(tmp_path):
    run = run_fake(tmp_path, "exit")
    assert not run.ok and not run.timed_out and run.exit_code == 3
    assert run.error == "command: exit code 3: boom: the model refused"
    assert run.stdout_path.read_text() == "working...\n"


def test_the_error_line_masks_the_key_the_agent_printed(tmp_path):
    run = run_fake(tmp_path, "leak", extra_env={"EVALFARM_FAKE_KEY": "sk-fake-0123456789"})
    assert run.error == "command: exit code 1: auth failed for key ***"


def test_an_unreadable_usage_file_is_a_runtime_error(tmp_path):
    run = run_fake(tmp_path, "garbage")
    assert run.exit_code == 0 and run.usage is None
    assert run.error == "unparseable output: command: its usage file is not JSON"


def test_stdin_is_closed_so_an_agent_reading_it_does_not_hang(tmp_path):
    run = run_fake(tmp_path, "stdin", timeout_s=10)
    assert run.ok and run.usage.final_message == "stdin had 0 bytes" and run.wall_s < 5


FAKE_OUTPUTS = {  # what a broken or cut-short agent prints, per driver, and the error we expect
    "claude": ("Welcome to Claude Code!", "claude: no JSON events on stdout"),
    "codex": ('{"type":"thread.started","thread_id":"t"}\n{"type":"turn.started"}',
              "codex: no turn.completed event"),
    "gemini": ("Loaded cached credentials.", "gemini: stdout is not its JSON report"),
    "opencode": ('{"type":"step_start","part":{}}', "opencode: no step_finish event"),
    "aider": ("Aider v0.86.2", "aider: it wrote no analytics log"),
}


@pytest.mark.parametrize("agent", sorted(FAKE_OUTPUTS))
def test_each_driver_reports_output_it_cannot_read_as_a_runtime_error(tmp_path, agent):
    printed, expected = FAKE_OUTPUTS[agent]
    binary = tmp_path / agent
    binary.write_text(f"#!/bin/sh\ncat <<'EOF'\n{printed}\nEOF\n")
    binary.chmod(0o755)
    driver = get_driver(agent)
    workdir = tmp_path / "wd"
    workdir.mkdir()
    run = run_agent(driver, AgentRequest("x", "m", "http://127.0.0.1:9/v1", extra_env={driver.key_env: "k"}),
                    workdir, Scratch(tmp_path / "scratch"), timeout_s=30, binary=binary, version="fake")
    assert run.exit_code == 0 and run.usage is None
    assert run.error.startswith("unparseable output: " + expected), run.error


def test_writes_outside_the_worktree_land_in_the_scratch_dirs_and_the_env_is_allow_listed(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-should-not-leak")
    monkeypatch.setenv("EVALFARM_BROKER_URL", "redis://:pw@host/0")
    monkeypatch.setenv("SUITE_VAR", "named-by-the-suite")
    repo = make_repo(tmp_path / "repo")
    real_home = Path.home()
    before_home = set(real_home.iterdir())
    with sandbox(repo, "main", parent=tmp_path / "spawn") as box:
        run = run_agent(fake("escape"), AgentRequest("x", "m", pass_env=("SUITE_VAR",)), box.worktree, box.scratch,
                        timeout_s=30, out_dir=tmp_path / "out")
        assert run.ok, run.error
        home = box.scratch.home
        for caught in (home / "escaped-home.txt", home / ".config/agent/settings.json", home / ".config/xdg.txt",
                       box.scratch.tmp / "tmp.txt", box.root / "escaped-parent.txt"):
            assert caught.is_file(), caught
        assert git(box.worktree, "status", "--porcelain") == ""  # nothing landed in the worktree either
        env = json.loads(run.usage.final_message)
    assert env["HOME"] == str(home) and env["TMPDIR"] == str(box.scratch.tmp)
    assert env["XDG_CONFIG_HOME"] == f"{home}/.config"
    assert env["SUITE_VAR"] == "named-by-the-suite"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "EVALFARM_BROKER_URL" not in env
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME",
                        "XDG_DATA_HOME", "XDG_STATE_HOME", "TMPDIR", "TMP", "TEMP", "NO_COLOR", "TERM",
                        "SUITE_VAR", "EVALFARM_USAGE_FILE", "PWD", "SHLVL", "_", "LC_CTYPE"}, sorted(env)
    # after: the scratch dirs are gone, the repo holds only what it held, the real HOME is untouched
    assert not box.root.exists()
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert sorted(p.name for p in repo.iterdir()) == [".git", "hello.py"]
    assert set(real_home.iterdir()) == before_home


def test_setup_errors_are_one_line(tmp_path, monkeypatch):
    with pytest.raises(AgentSetupError, match=r"^command: unknown placeholder \{promt\}; use \{prompt\}"):
        get_driver("command", "my-agent {promt}")
    with pytest.raises(AgentSetupError, match="^agent: unknown agent 'cursor'; expected one of claude, codex"):
        get_driver("cursor")
    with pytest.raises(AgentNotInstalled, match="^command: no-such-agent-xyz: not found or not executable$"):
        resolve(get_driver("command", "no-such-agent-xyz {prompt}"))
    monkeypatch.setenv("EVALFARM_AGENTS_DIR", str(tmp_path / "agents"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(AgentNotInstalled) as exc:
        resolve(get_driver("claude"))
    assert str(exc.value) == (f"claude: not installed: run `make agents` (npm install --prefix {tmp_path}/agents/claude "
                              "@anthropic-ai/claude-code@2.1.197)")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    driver = get_driver("claude")
    with pytest.raises(AgentSetupError, match="^agent claude: the key variable ANTHROPIC_API_KEY is not set; export it"):
        driver.build(AgentRequest("x", "m"), Path("/bin/true"), tmp_path, Scratch(tmp_path / "s"))
    monkeypatch.setenv("MY_KEY", "sk-from-my-key")
    inv = driver.build(AgentRequest("x", "m", key_from="MY_KEY"), Path("/bin/true"), tmp_path, Scratch(tmp_path / "s"))
    assert inv.env["ANTHROPIC_API_KEY"] == "sk-from-my-key" and "MY_KEY" not in inv.env


def test_a_command_template_fills_placeholders_word_by_word_without_a_shell(tmp_path):
    driver = get_driver("command", "printf '%s|%s|%s|%s' {prompt} {workdir} model={model} {base_url}")
    workdir = tmp_path / "wd"
    workdir.mkdir()
    prompt = "fix it; rm -rf / $(whoami) \"quoted\" {model}"
    run = run_agent(driver, AgentRequest(prompt, "gpt-x", "http://127.0.0.1:1/v1", addendum="Be brief."),
                    workdir, Scratch(tmp_path / "scratch"), timeout_s=30)
    assert run.ok and run.usage.input_tokens == 0 and run.usage.cost_usd is None  # no usage file: no usage
    assert run.usage.final_message == f"Be brief.\n\n{prompt}|{workdir}|model=gpt-x|http://127.0.0.1:1/v1"


def test_detect_runs_version_under_a_throwaway_home(tmp_path, monkeypatch):
    """Even `--version` writes state into HOME (gemini, codex, opencode): detect must not touch the real one."""
    from evalfarm.agents import agents_dir, detect
    from evalfarm.agents.detect import INSTALLS, _version

    monkeypatch.setenv("EVALFARM_AGENTS_DIR", str(agents_dir()))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(var, raising=False)
    _version.cache_clear()
    found = {agent: detect(agent) for agent in INSTALLS}
    if not any(found.values()):
        pytest.skip("no agent installed: run `make agents`")
    assert list(home.iterdir()) == []
