"""Helpers for the spawn-mode tests: a git repo, specs and suites for the fake or real agents, the
farm's environment, and the after-test evidence (only the main worktree, no scratch dir)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from agents_fixtures import git, make_repo
from conftest import ROOT, wait_for  # noqa: F401  (spawn tests import it from here)

FAKE = ROOT / "tests" / "agent_fake.py"
# the fake agent's mode and arguments come from the prompt's last line (agent_fake.py "prompt" mode)
FAKE_TEMPLATE = f"{sys.executable} {FAKE} prompt {{usage_file}} {{prompt}}"


def fake_adapter(**extra) -> dict:
    return {"id": "fake", "provider": "agent", "agent": "command", "template": FAKE_TEMPLATE, "model": "fake-1",
            **extra}


def write_spec(path: Path, repo: Path, prompts: list[dict], adapters: list[dict] | None = None,
               **workspace) -> Path:
    spec = {"name": path.stem, "workspace": {"repo": str(repo), "base": "main", **workspace},
            "adapters": adapters or [fake_adapter()], "prompts": prompts}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def spawn_dirs(spawn_dir: Path) -> list[str]:
    """Sandboxes (scratch roots) still on disk."""
    return sorted(p.name for p in spawn_dir.glob("evalfarm-spawn-*")) if spawn_dir.is_dir() else []


def worktrees(repo: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def assert_clean(repo: Path, spawn_dir: Path) -> str:
    """After the tests: `git worktree list` shows only the main worktree, no sandbox is left, the repo's
    own tree is untouched. Returns the `git worktree list` text (the evidence)."""
    listing = git(repo, "worktree", "list")
    assert worktrees(repo) == [str(repo)], listing
    assert spawn_dirs(spawn_dir) == []
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    return listing


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def report_of(res: subprocess.CompletedProcess) -> dict:
    assert res.stdout.strip(), res.stderr
    return json.loads(res.stdout)


def outcomes_by_prompt(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for o in report["outcomes"]:
        out.setdefault(o["prompt_id"], []).append(o)
    return out


# what the fake agent needs inside a sandbox (read-only): its script and this Python (a pyenv or venv one
# lives outside /usr); a spawn worker binds nothing else of a template's
SANDBOX_PATHS = ":".join(dict.fromkeys([str(ROOT / "tests"), sys.base_prefix, sys.prefix]))
# tests whose fake agent writes traces or pid files outside its worktree opt out of the sandbox
UNSANDBOXED = {"isolation": "none"}


def spawn_env(tmp: Path, **extra: str) -> dict[str, str]:
    """What every process of a spawn test shares: its own sandbox dir and blob dir."""
    env = {"EVALFARM_SPAWN_DIR": str(tmp / "spawn"), "EVALFARM_BLOB_DIR": str(tmp / "blobs"),
           "EVALFARM_SANDBOX_PATHS": SANDBOX_PATHS}
    env.update(extra)
    return env


__all__ = ["FAKE", "FAKE_TEMPLATE", "UNSANDBOXED", "assert_clean", "fake_adapter", "git", "make_repo", "outcomes_by_prompt",
           "pid_alive", "report_of", "spawn_dirs", "spawn_env", "wait_for", "worktrees", "write_spec"]
