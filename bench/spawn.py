"""Spawn mode's figures (``make bench``, section ``spawn``; alone: ``python bench/bench.py --only spawn``).

- 20 spawn tasks of a fake agent that takes 2 s (tests/agent_fake.py, through the ``command`` driver)
  on 2 spawn workers with concurrency 2 each, on a real Redis: the run's wall time beside the ideal
  20 x 2 s / 4 slots = 10 s. What is above it is the farm's overhead per task: dispatch, a worktree
  and its removal, the check, the diff, recording the outcome, the aggregate.
- A worktree's set-up plus clean-up on a repo of 1,000 files (``git worktree add --detach``, a private
  HOME/XDG/TMPDIR, then removal), medians over 20 tasks; the target is under 0.3 s together.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "agent_fake.py"
GIT = ["git", "-c", "user.email=bench@evalfarm", "-c", "user.name=bench"]


def make_repo(path: Path, n_files: int = 0) -> Path:
    path.mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q", "-b", "main", str(path)], check=True)
    (path / "hello.py").write_text('print("hello")\n')
    for i in range(n_files):
        sub = path / f"pkg{i // 50}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i % 50}.py").write_text("".join(f"line {j}\n" for j in range(40)))
    subprocess.run([*GIT, "-C", str(path), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(path), "commit", "-qm", "init"], check=True)
    return path


def spawn_tasks(redis_url: str, tmp: Path, env: dict[str, str], start_worker, stop_worker, n: int = 20,
                seconds: float = 2.0, workers: int = 2, concurrency: int = 2) -> dict[str, Any]:
    repo = make_repo(tmp / "spawn-repo")
    spec = tmp / "spawn.json"  # JSON is YAML
    spec.write_text(json.dumps({
        "name": "bench-spawn", "workspace": {"repo": str(repo), "base": "main"},
        "adapters": [{"id": "fake", "provider": "agent", "agent": "command", "model": "fake",
                      "template": f"{sys.executable} {FAKE} sleep {{usage_file}} {seconds:g}"}],
        "prompts": [{"id": f"t{i:02d}", "text": "bench", "check": "grep -q 'hello, world' hello.py"}
                    for i in range(n)]}))
    env = {**env, "EVALFARM_SPAWN_DIR": str(tmp / "spawn-dir"), "EVALFARM_BLOB_DIR": str(tmp / "blobs")}
    cli = [sys.executable, "-m", "evalfarm.cli"]
    worker_env = {**env, "EVALFARM_BROKER_URL": redis_url}
    procs = [start_worker([*cli, "worker", "--pool", "aggregate", "-c", "1", "--loglevel", "INFO"], worker_env)]
    try:
        for _ in range(workers):
            procs.append(start_worker([*cli, "worker", "--pool", "spawn", "-c", str(concurrency), "--loglevel",
                                       "INFO"], worker_env))
        t0 = time.perf_counter()
        done = subprocess.run([*cli, "run", str(spec), "--json", "--no-save", "--broker", redis_url], env=env,
                              capture_output=True, text=True, timeout=600, cwd=tmp)
        wall = time.perf_counter() - t0
    finally:
        for p in procs:
            stop_worker(p)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    report = json.loads(done.stdout)
    passed = sum(1 for o in report["outcomes"] if o["passed"])
    agent_s = [o["agent"]["wall_s"] for o in report["outcomes"]]
    ideal = n * seconds / (workers * concurrency)
    row = {"name": f"spawn: {n} tasks x {seconds:g} s, {workers} workers x {concurrency}", "tasks": n,
           "passed": passed, "wall_s": round(wall, 2), "run_duration_s": report["duration_s"], "ideal_s": ideal,
           "efficiency": round(ideal / report["duration_s"], 3),
           "overhead_per_task_s": round((report["duration_s"] - ideal) * workers * concurrency / n, 3),
           "agent_wall_median_s": round(statistics.median(agent_s), 3)}
    print(f"{row['name']}: run {row['run_duration_s']:.2f} s (CLI {row['wall_s']:.2f} s) vs ideal {ideal:g} s "
          f"({row['efficiency']:.0%}); {passed}/{n} passed; overhead {row['overhead_per_task_s']:.3f} s per task "
          f"per slot; agent wall median {row['agent_wall_median_s']:.2f} s")
    return row


def worktree_overhead(tmp: Path, n_files: int = 1000, runs: int = 20) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from evalfarm.agents.sandbox import create

    repo = make_repo(tmp / "wt-repo", n_files)
    parent = tmp / "wt-spawn"
    setup, cleanup = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        box = create(repo, "main", parent)
        t1 = time.perf_counter()
        box.remove()
        cleanup.append(time.perf_counter() - t1)
        setup.append(t1 - t0)
    s, c = statistics.median(setup), statistics.median(cleanup)
    row = {"name": f"worktree set-up + clean-up, {n_files} files", "runs": runs, "setup_median_s": round(s, 4),
           "cleanup_median_s": round(c, 4), "total_median_s": round(s + c, 4),
           "total_best_s": round(min(a + b for a, b in zip(setup, cleanup)), 4),
           "total_max_s": round(max(a + b for a, b in zip(setup, cleanup)), 4), "target_s": 0.3}
    print(f"{row['name']}: set-up {s:.3f} s + clean-up {c:.3f} s = {s + c:.3f} s median "
          f"(best {row['total_best_s']:.3f}, worst {row['total_max_s']:.3f}; target < 0.3 s)")
    return row


def spawn(redis_url: str, tmp: Path, env: dict[str, str], start_worker, stop_worker) -> list[dict[str, Any]]:
    """The section ``make bench`` runs (bench.py passes its Redis and worker helpers)."""
    return [spawn_tasks(redis_url, tmp, env, start_worker, stop_worker), worktree_overhead(tmp)]
