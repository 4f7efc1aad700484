"""What an agent changed: ``git diff`` of its worktree against the base commit, new files included.

New (untracked, not ignored) files are marked intent-to-add in the worktree's own index, so the diff
shows them without writing a single object into the repo the worktree shares. Commits the agent made
are covered too: the diff is from the base commit to the files on disk.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _git(worktree: Path, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.quotepath=off", "-C", str(worktree),
                           *args], input=stdin, capture_output=True, timeout=300,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise AgentOutputError(f"git {args[0]} in the worktree failed: {reason[-1] if reason else done.returncode}")
    return done.stdout


def capture(worktree: Path, base: str) -> Diff:
    untracked = _git(worktree, "ls-files", "-z", "--others", "--exclude-standard")
    if untracked:
        _git(worktree, "add", "--intent-to-add", "--pathspec-from-file=-", "--pathspec-file-nul", stdin=untracked)
    numstat = _git(worktree, "diff", "--numstat", "-z", "--no-renames", base).decode(errors="replace")
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
    patch = _git(worktree, "diff", "--binary", "--no-renames", "--no-color", "--no-ext-diff", base) if files else b""
    if len(patch) > MAX_PATCH:
        raise AgentOutputError(f"the agent's diff is larger than {MAX_PATCH // 2**20} MiB")
    return Diff(files, ins, dels, binary, patch)
