"""A throw-away git worktree plus a private HOME/XDG/TMPDIR for one agent run, removed always.

Layout, under ``$EVALFARM_SPAWN_DIR`` (default ``<tmp>/evalfarm-spawn``)::

    evalfarm-spawn-XXXX/           the scratch root (one per run)
      .evalfarm-sandbox.json       owner (host, pid, start time) and repo: lets prune_stale tell dead from live
      wt-XXXX/                     ``git worktree add --detach`` at the base commit (unique name: no clash
                                   between concurrent runs on one repo)
      home/ tmp/ evalfarm/         the agent's HOME (with XDG dirs) and TMPDIR, our private files

A worker killed mid-run leaves such a dir and a worktree entry in the repo; ``prune_stale`` (run at
worker start) removes dirs whose owner process is gone and runs ``git worktree prune``. No hooks run
while we create the worktree (``core.hooksPath=/dev/null``).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .base import Scratch
from .errors import SandboxError

PREFIX = "evalfarm-spawn-"
MARKER = ".evalfarm-sandbox.json"
_GIT = ["git", "-c", "core.hooksPath=/dev/null"]


def scratch_parent() -> Path:
    return Path(os.environ.get("EVALFARM_SPAWN_DIR") or Path(tempfile.gettempdir()) / "evalfarm-spawn")


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_GIT, "-C", str(repo), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})


def _rmtree(path: Path) -> None:
    """Remove a tree even where an agent made parts read-only (Go's module cache does)."""
    def fix(func, p, _exc):  # noqa: ANN001
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            os.chmod(p, stat.S_IRWXU)
            func(p)
        except FileNotFoundError:
            pass

    if path.exists() or path.is_symlink():
        shutil.rmtree(path, onerror=fix)


@dataclass
class Sandbox:
    repo: Path
    base: str
    root: Path
    worktree: Path
    scratch: Scratch

    def remove(self) -> None:
        """Idempotent: the worktree entry, its files and the whole scratch root go."""
        if self.worktree.exists():
            done = _git(self.repo, "worktree", "remove", "--force", "--force", str(self.worktree))
            if done.returncode != 0:
                _rmtree(self.worktree)
                _git(self.repo, "worktree", "prune")
        _rmtree(self.root)


def create(repo: Path, base: str, parent: Path | None = None) -> Sandbox:
    """A detached worktree of ``repo`` at ``base`` and fresh private dirs; nothing is left on failure."""
    repo = Path(repo).resolve()
    parent = parent or scratch_parent()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    try:
        owner = {"repo": str(repo), "host": socket.gethostname(), "pid": os.getpid(),
                 "start": _start_time(os.getpid()), "created": time.time()}
        (root / MARKER).write_text(json.dumps(owner), encoding="utf-8")
        worktree = root / f"wt-{root.name[len(PREFIX):]}"
        done = _git(repo, "worktree", "add", "--detach", "--quiet", str(worktree), base)
        if done.returncode != 0:
            reason = " ".join((done.stderr.strip().splitlines() or ["git worktree add failed"])[-1].split())
            raise SandboxError(f"repo {repo}: cannot check out {base!r}: {reason}")
        return Sandbox(repo, base, root, worktree, Scratch(root).create())
    except BaseException:
        _rmtree(root)
        raise


@contextmanager
def sandbox(repo: Path, base: str, parent: Path | None = None) -> Iterator[Sandbox]:
    box = create(repo, base, parent)
    try:
        yield box
    finally:
        box.remove()


def _owner_alive(owner: dict) -> bool:
    if owner.get("host") != socket.gethostname():
        return True  # another host's run (shared scratch dir): not ours to judge
    pid = owner.get("pid")
    return isinstance(pid, int) and _start_time(pid) is not None and _start_time(pid) == owner.get("start")


def prune_stale(repo: Path, parent: Path | None = None, min_age_s: float = 60.0) -> list[Path]:
    """Remove scratch dirs of ``repo`` whose owner process is gone, then ``git worktree prune``.
    A dir without a readable marker (its owner died while creating it) goes once older than
    ``min_age_s``. Returns the dirs removed."""
    repo = Path(repo).resolve()
    parent = parent or scratch_parent()
    removed = []
    for root in sorted(parent.glob(PREFIX + "*")) if parent.is_dir() else []:
        try:
            owner = json.loads((root / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            if time.time() - root.stat().st_mtime > min_age_s:
                _rmtree(root)
                removed.append(root)
            continue
        if owner.get("repo") != str(repo) or _owner_alive(owner):
            continue
        for wt in root.glob("wt-*"):
            _git(repo, "worktree", "remove", "--force", "--force", str(wt))
        _rmtree(root)
        removed.append(root)
    _git(repo, "worktree", "prune")
    return removed
