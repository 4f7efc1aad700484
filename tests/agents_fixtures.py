"""Helpers for the agent tests: a real git repo, a real `evalfarm mock-provider --agent-script`,
and what that server says it sent."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from evalfarm.agents import AgentRequest, detect, get_driver, install_hint, run_agent, sandbox
from providers_fixture import MockProviderProc

MODELS = {"claude": "claude-sonnet-4-5", "codex": "gpt-5.5", "gemini": "gemini-2.5-pro", "opencode": "mock-coder",
          "aider": "mock-coder"}
MARK = "EVALFARM-ADDENDUM-7f3a: answer tersely."
OPT_IN = os.environ.get("EVALFARM_OPTIN_AGENTS") == "1"

GIT_ID = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
EDIT_SCRIPT = {
    "steps": [
        {"read": "hello.py", "usage": {"input_tokens": 1000, "output_tokens": 20}},
        {"edit": {"file": "hello.py", "old": 'print("hello")', "new": 'print("hello, world")'},
         "usage": {"input_tokens": 1500, "output_tokens": 60}},
        {"say": "Done: greeting updated.", "usage": {"input_tokens": 2000, "output_tokens": 10}},
    ],
}
SHELL_SCRIPT = {
    "steps": [
        {"shell": "sed -i 's/\"hello\"/\"hello, shell\"/' hello.py", "usage": {"input_tokens": 700, "output_tokens": 30}},
        {"say": "Done: ran sed.", "usage": {"input_tokens": 900, "output_tokens": 5}},
    ],
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_ID, "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def make_repo(path: Path, n_files: int = 0) -> Path:
    """A git repo on branch main with hello.py (and ``n_files`` more) committed."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "hello.py").write_text('print("hello")\n')
    for i in range(n_files):
        sub = path / f"pkg{i // 50}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i % 50}.py").write_text("".join(f"line {j}\n" for j in range(40)))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "init")
    return path


class AgentServer:
    """A real `evalfarm mock-provider` subprocess playing a script to agents."""

    def __init__(self, tmp: Path, script: dict) -> None:
        self.script_path = tmp / "agent-script.yaml"
        self.script_path.write_text(yaml.safe_dump(script, sort_keys=False))
        self.proc = MockProviderProc("--agent-script", str(self.script_path))

    @property
    def url(self) -> str:
        return self.proc.url

    def log(self, grep: str | None = None) -> list[dict]:
        query = "?" + urllib.parse.urlencode({"grep": grep}) if grep else ""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.proc.port}/agent-log{query}", timeout=5) as r:
            return json.loads(r.read())

    def model_calls(self, grep: str | None = None) -> list[dict]:
        """Requests that got a model reply (not 404s or count_tokens)."""
        return [e for e in self.log(grep) if e["protocol"] != "unknown" and e["kind"] != "count_tokens"]

    def sent(self) -> tuple[int, int]:
        calls = self.model_calls()
        return (sum(e["usage"]["input_tokens"] for e in calls), sum(e["usage"]["output_tokens"] for e in calls))

    def side_tokens(self) -> tuple[int, int]:
        """Tokens of the completions answered outside the script (side requests: opencode's title)."""
        t = self.proc.stats()["tokens_sent"]
        return t["input_tokens"], t["output_tokens"]

    def stop(self) -> None:
        self.proc.stop()


@pytest.fixture
def agent_server(tmp_path):
    servers: list[AgentServer] = []

    def start(script: dict = EDIT_SCRIPT) -> AgentServer:
        server = AgentServer(tmp_path, script)
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def outside_worktree(root: Path) -> list[str]:
    """Files under a sandbox's scratch root that are not in its worktree (what the agent wrote
    to HOME, XDG, TMPDIR, our private files)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and not p.relative_to(root).parts[0].startswith("wt-"))


def git_dir_state(repo: Path) -> dict[str, str]:
    """Content hashes of the repo's own .git files (not git's per-worktree admin dirs): what an agent
    in a linked worktree could change in the repo it shares."""
    git_dir = repo / ".git"
    return {str(p.relative_to(git_dir)): hashlib.sha256(p.read_bytes()).hexdigest() for p in git_dir.rglob("*")
            if p.is_file() and p.relative_to(git_dir).parts[0] != "worktrees"}


def installed(agent: str):
    found = detect(agent)
    if found is None:
        if OPT_IN:  # `make test-agents` installs every agent first: missing is a failure there
            pytest.fail(install_hint(agent))
        pytest.skip(install_hint(agent))
    return found


def run_in_sandbox(agent: str, repo, server, tmp_path, prompt: str = "Change the greeting in hello.py",
                   **request):
    binary, version = installed(agent)
    driver = get_driver(agent)
    before = git_dir_state(repo)
    req = AgentRequest(prompt, MODELS[agent], server.url, extra_env={driver.key_env: "sk-test-0123456789abcdef"},
                       **request)
    with sandbox(repo, "main", parent=tmp_path / "spawn") as box:
        run = run_agent(driver, req, box.worktree, box.scratch, timeout_s=180, binary=binary, version=version,
                        out_dir=tmp_path / "out")  # kept after the sandbox goes
        assert run.ok, f"{run.error}\n{run.stderr_path.read_text()[-3000:]}"
        edited = (box.worktree / "hello.py").read_text()
        status = git(box.worktree, "status", "--porcelain", "--ignored")
        written = outside_worktree(box.root)
    # everything is gone afterwards: no worktree but the main one, no scratch dir, the repo untouched
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert list((tmp_path / "spawn").iterdir()) == []
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "hello.py").read_text() == 'print("hello")\n'
    after = git_dir_state(repo)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    # nothing changes in the repo's git dir: each task has a .git of its own (opencode writes its project
    # id, .git/opencode, into that one, which goes with the task)
    assert changed == [], changed
    return run, edited, status, written
