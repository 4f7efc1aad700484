"""The worktree sandbox with real git: fast on a repo of 1,000 files, removed always, concurrent runs
on one repo never share a worktree, and a run killed with SIGKILL is pruned at the next start."""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agents_fixtures import git, make_repo
from evalfarm.agents import SandboxError, prune_stale, sandbox
from evalfarm.agents.sandbox import MARKER, PREFIX, create


def worktrees(repo) -> list[str]:
    return [line[len("worktree "):] for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def test_set_up_and_clean_up_on_1000_files_leave_nothing_and_stay_bounded(tmp_path):
    """The figure (target 0.3 s per task, set-up plus clean-up) is measured by `make bench`
    (bench/spawn.py, worktree_overhead) on a quiet machine. Here, beside other tests on 2 cores (the
    best of ten went to 1.5 s under xdist's load), the bound only catches a cost that grows wrong,
    such as a copy of the repo instead of a worktree."""
    repo = make_repo(tmp_path / "repo", n_files=999)
    assert len(git(repo, "ls-files").splitlines()) == 1000
    parent = tmp_path / "spawn"
    walls, cpus = [], []
    for _ in range(10):
        c0, t0 = os.times(), time.perf_counter()
        box = create(repo, "main", parent)
        t1 = time.perf_counter()
        box.remove()
        t2, c2 = time.perf_counter(), os.times()
        walls.append((t1 - t0, t2 - t1))
        cpus.append(sum(c2[i] - c0[i] for i in (0, 1, 2, 3)))  # ours and git's, user and system
        assert not box.root.exists()
    setup, cleanup = statistics.median(t for t, _ in walls), statistics.median(c for _, c in walls)
    cpu = statistics.median(cpus)
    print(f"\nFIGURES sandbox 1000 files: set-up median {setup:.3f} s, clean-up median {cleanup:.3f} s (wall), "
          f"CPU median {cpu:.3f} s per task, worst wall {max(a + b for a, b in walls):.3f} s")
    assert min(a + b for a, b in walls) < 5.0
    assert worktrees(repo) == [str(repo)] and list(parent.iterdir()) == []
    box = create(repo, "main", parent)
    assert len(list(box.worktree.rglob("*.py"))) == 1000  # a full checkout, not an empty dir
    box.remove()


def test_the_sandbox_is_removed_when_the_run_raises(tmp_path):
    repo = make_repo(tmp_path / "repo")
    with pytest.raises(RuntimeError):
        with sandbox(repo, "main", parent=tmp_path / "spawn") as box:
            (box.worktree / "new.txt").write_text("x")
            (box.scratch.home / "state").write_text("x")
            os.chmod(box.scratch.home, 0o500)  # read-only dirs (Go's module cache) must not stop removal
            raise RuntimeError("agent blew up")
    assert not box.root.exists() and worktrees(repo) == [str(repo)]
    assert git(repo, "status", "--porcelain") == ""


def test_the_worktree_is_detached_at_the_base_and_the_repo_keeps_its_branch(tmp_path):
    repo = make_repo(tmp_path / "repo")
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "hello.py").write_text('print("v2")\n')
    git(repo, "commit", "-qam", "v2")
    with sandbox(repo, first, parent=tmp_path / "spawn") as box:
        assert git(box.worktree, "rev-parse", "HEAD").strip() == first
        assert git(box.worktree, "branch", "--show-current").strip() == ""  # detached: no branch is taken
        assert (box.worktree / "hello.py").read_text() == 'print("hello")\n'
    assert git(repo, "branch", "--show-current").strip() == "main"


def test_an_unknown_base_or_repo_is_one_line_and_leaves_nothing(tmp_path):
    repo = make_repo(tmp_path / "repo")
    parent = tmp_path / "spawn"
    with pytest.raises(SandboxError) as exc:
        create(repo, "no-such-ref", parent)
    assert str(exc.value).startswith(f"repo {repo}: cannot check out 'no-such-ref': ") and "\n" not in str(exc.value)
    with pytest.raises(SandboxError, match="cannot check out 'main'"):
        create(tmp_path / "not-a-repo", "main", parent)
    assert list(parent.iterdir()) == [] and worktrees(repo) == [str(repo)]


def test_concurrent_runs_on_one_repo_get_their_own_worktrees(tmp_path):
    repo = make_repo(tmp_path / "repo", n_files=200)
    parent = tmp_path / "spawn"

    def one(i: int) -> str:
        with sandbox(repo, "main", parent=parent) as box:
            (box.worktree / "hello.py").write_text(f"print({i})\n")
            git(box.worktree, "add", "hello.py")  # each worktree has its own index: no index.lock fights
            assert git(box.worktree, "diff", "--cached", "--name-only").strip() == "hello.py"
            return str(box.worktree)

    with ThreadPoolExecutor(4) as pool:
        seen = list(pool.map(one, range(24)))
    assert len(set(seen)) == 24
    assert worktrees(repo) == [str(repo)] and list(parent.iterdir()) == []
    assert git(repo, "status", "--porcelain") == ""


HOLDER = """
import sys, time
from pathlib import Path
from evalfarm.agents.sandbox import create
box = create(Path(sys.argv[1]), "main", Path(sys.argv[2]))
(box.scratch.home / "agent-state").write_text("x")
print(box.root, flush=True)
time.sleep(600)
"""


def test_a_run_killed_with_sigkill_is_pruned_and_a_live_one_is_kept(tmp_path):
    repo = make_repo(tmp_path / "repo")
    parent = tmp_path / "spawn"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo), str(parent)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        dead_root = holder.stdout.readline().strip()
        assert dead_root.startswith(str(parent / PREFIX))
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
    live = create(repo, "main", parent)
    try:
        assert len(list(parent.iterdir())) == 2  # the killed run's scratch dir, the live one's
        removed = prune_stale(repo, parent)
        assert [str(p) for p in removed] == [dead_root]
        assert list(parent.iterdir()) == [live.root] and worktrees(repo) == [str(repo)]
        assert live.worktree.is_dir() and (live.root / MARKER).is_file()
        assert prune_stale(repo, parent) == []  # idempotent
    finally:
        live.remove()
    assert worktrees(repo) == [str(repo)] and list(parent.iterdir()) == []


def test_prune_leaves_other_repos_alone_and_removes_marker_less_leftovers(tmp_path):
    repo, other = make_repo(tmp_path / "repo"), make_repo(tmp_path / "other")
    parent = tmp_path / "spawn"
    theirs = create(other, "main", parent)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = json.loads((theirs.root / MARKER).read_text())
    (theirs.root / MARKER).write_text(json.dumps({**owner, "pid": int(gone.stdout)}))  # its owner died
    half_made = parent / (PREFIX + "halfmade")
    half_made.mkdir()
    os.utime(half_made, (time.time() - 3600, time.time() - 3600))
    try:
        assert prune_stale(repo, parent) == [half_made]  # the other repo's dead run is not ours to prune
        assert theirs.root.is_dir() and theirs.worktree.is_dir()
        assert prune_stale(other, parent) == [theirs.root]
        assert worktrees(other) == [str(other)] and list(parent.iterdir()) == []
    finally:
        theirs.remove()
