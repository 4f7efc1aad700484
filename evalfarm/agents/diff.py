"""What an agent changed: ``git diff`` of its worktree against the base commit, new files included.

It runs through the harness's own git dir and index (``git_env``: sandbox.py makes them, out of the
agent's reach), with safegit's environment and ``--no-textconv --no-ext-diff``: whatever the agent
wrote into its checkout's ``.git`` (a fsmonitor, a filter, a hook) is never read. New (untracked,
not ignored) files are marked intent-to-add in that private index, so the diff shows them without
writing a single object anywhere. Commits the agent made are covered too: the diff is from the base
commit to the files on disk.
"""
from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .safegit import argv as git_argv, env as git_env_of
from .errors import AgentOutputError

MAX_PATCH = 64 * 1024 * 1024


@dataclass(frozen=True)
class Diff:
    files: int
    insertions: int
    deletions: int
    binary_files: int
    patch: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.patch).hexdigest()

    def figures(self) -> dict[str, Any]:
        return {"files": self.files, "insertions": self.insertions, "deletions": self.deletions,
                "binary_files": self.binary_files, "patch_bytes": len(self.patch),
                "patch_sha256": self.sha256 if self.patch else None}


def _git(worktree: Path, *args: str, stdin: bytes | None = None, git_env: dict[str, str] | None = None) -> bytes:
    done = subprocess.run(git_argv("-c", "core.quotepath=off", "-C", str(worktree), *args), input=stdin,
                          capture_output=True, timeout=300, env=git_env_of(extra=git_env))
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise AgentOutputError(f"git {args[0]} in the worktree failed: {reason[-1] if reason else done.returncode}")
    return done.stdout


def capture(worktree: Path, base: str, git_env: dict[str, str] | None = None) -> Diff:
    """The diff of ``worktree`` against ``base``; ``git_env`` (sandbox.Sandbox.harness_git) names the git dir
    and index to go through (without it: the worktree's own, for a checkout nobody untrusted touched)."""
    g = lambda *a, **k: _git(worktree, *a, git_env=git_env, **k)  # noqa: E731
    if git_env:
        g("read-tree", base)  # the private index starts at the base commit
    untracked = g("ls-files", "-z", "--others", "--exclude-standard")
    if untracked:
        g("add", "--intent-to-add", "--pathspec-from-file=-", "--pathspec-file-nul", stdin=untracked)
    numstat = g("diff", "--numstat", "-z", "--no-renames", "--no-textconv", "--no-ext-diff", base).decode(errors="replace")
    files = ins = dels = binary = 0
    for record in filter(None, numstat.split("\0")):
        parts = record.split("\t")
        if len(parts) < 3:
            continue
        files += 1
        if parts[0] == "-":
            binary += 1
        else:
            ins, dels = ins + int(parts[0]), dels + int(parts[1])
    patch = g("diff", "--binary", "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv", base) if files else b""
    if len(patch) > MAX_PATCH:
        raise AgentOutputError(f"the agent's diff is larger than {MAX_PATCH // 2**20} MiB")
    return Diff(files, ins, dels, binary, patch)
