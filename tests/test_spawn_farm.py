"""Spawn mode on the Redis farm: agent items go one per task to the spawn queue (on its own broker
database), and the fault tests with the fake agent: a spawn worker SIGKILLed mid-spawn (its agent
left running), an agent that hangs, one that exits non-zero, one that writes outside its worktree,
two workers on one repo at once. Every test ends with the repo's `git worktree list` showing only
the main worktree and no sandbox left. Real redis-server, real workers, real git, real processes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from conftest import run_cli
from spawn_support import (assert_clean, make_repo, outcomes_by_prompt, pid_alive, report_of, spawn_dirs, spawn_env,
                           UNSANDBOXED, wait_for, worktrees, write_spec)


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


@pytest.fixture
def farm(tmp_path, redis_server, start_worker):
    """The farm's URLs and environment: the run store and main queues on db 0, the spawn queue on db 1, and
    an aggregate worker; spawn workers are started by each test."""
    main = redis_server.url
    spawn_url = main[:-1] + "1"
    env = spawn_env(tmp_path, EVALFARM_SPAWN_BROKER_URL=spawn_url, EVALFARM_SPAWN_VISIBILITY_TIMEOUT="6")
    start_worker(main, pool="aggregate", concurrency=1, **env)

    class Farm:
        url, spawn = main, spawn_url

        @staticmethod
        def worker(concurrency: int = 2, unsandboxed: bool = False, **extra):
            return start_worker(main, pool="spawn", concurrency=concurrency,
                                extra_args=["--allow-unsandboxed"] if unsandboxed else None, **{**env, **extra})

        @staticmethod
        def cli(*args: str, timeout: float = 180, **extra):
            return run_cli(*args, broker=main, cwd=tmp_path, timeout=timeout, **{**env, **extra})

    return Farm


def counts(url: str, run_id: str) -> dict[str, int]:
    raw = redis.Redis.from_url(url).hgetall(f"ef:run:{run_id}:counts")
    return {k.decode(): int(v) for k, v in raw.items()}


def test_sigkill_mid_spawn_is_redelivered_pruned_at_the_next_worker_start_and_counted_once(tmp_path, repo, farm):
    trace = tmp_path / "trace.log"
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": "slow", "text": f"trace {trace} 120 once",
                                                      "check": "grep -q 'hello, world' hello.py"}], **UNSANDBOXED)
    first = farm.worker(concurrency=1, unsandboxed=True)
    res = farm.cli("run", str(spec), "--detach")
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    started = wait_for(lambda: trace.exists() and trace.read_text().split(), 30, "the agent to start")
    agent_pid = int(started[1])
    [stale] = spawn_dirs(tmp_path / "spawn")
    first.kill()  # SIGKILL the worker mid-spawn: its agent (its own session) goes on, orphaned
    assert pid_alive(agent_pid) and worktrees(repo) == [str(repo)]  # a task's checkout is a clone, not a worktree
    second = farm.worker(concurrency=1, unsandboxed=True)
    # the next worker's start pruned the dead run: agent killed, worktree and scratch dir gone
    assert not pid_alive(agent_pid)
    assert stale not in spawn_dirs(tmp_path / "spawn")
    assert "spawn_pruned_dead_sandboxes" in second.log.read_text() and "worker start" in second.log.read_text()
    # the task comes back after the visibility timeout (6 s) and finishes on the second worker, once
    done = farm.cli("wait", run_id, "--json", "--no-save", "--timeout", "120")
    assert done.returncode == 0, done.stderr
    [out] = report_of(done)["outcomes"]
    assert out["passed"] is True and out["error"] is None
    # the death was the infrastructure's: the second start ran it again, and the outcome says so
    assert out["failure_class"] == "passed" and out["agent"]["worker_deaths"] == 1
    starts = [line for line in trace.read_text().splitlines() if line.startswith("start")]
    assert len(starts) == 2  # the agent ran twice (killed once) ...
    c = counts(farm.url, run_id)
    assert c["done"] == 1 and c["executed"] == 1  # ... and the item was counted once
    status = json.loads(farm.cli("status", run_id, "--json").stdout)
    assert status["duplicate_executions"] == 0 and status["done"] == 1
    print("git worktree list after the SIGKILL test:\n" + assert_clean(repo, tmp_path / "spawn"))


def test_a_task_whose_workers_keep_dying_is_infra_failed_after_its_retries_never_agent_failed(tmp_path, repo, farm):
    """EVALFARM_AGENT_INFRA_RETRIES=1: the spawn worker running the task is SIGKILLed, the redelivered task
    starts the agent again on a new worker (the one retry), that worker is SIGKILLed too; the third worker
    does not run the agent again: the item is infra_failed (WorkerDied), unmeasured, reported as coverage."""
    trace = tmp_path / "trace.log"
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": "doomed", "text": f"trace {trace} 120",
                                                      "check": "grep -q 'hello, world' hello.py"}], **UNSANDBOXED)
    retries = {"EVALFARM_AGENT_INFRA_RETRIES": "1"}
    worker = farm.worker(concurrency=1, unsandboxed=True, **retries)
    res = farm.cli("run", str(spec), "--detach")
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()

    def starts() -> int:
        return sum(1 for line in (trace.read_text().splitlines() if trace.exists() else []) if line.startswith("start"))

    for n in (1, 2):
        wait_for(lambda: starts() >= n, 60, f"start {n} of the agent")
        worker.kill()  # SIGKILL mid agent task
        worker = farm.worker(concurrency=1, unsandboxed=True, **retries)
    done = farm.cli("wait", run_id, "--json", "--no-save", "--timeout", "90")
    report = report_of(done)
    [out] = report["outcomes"]
    assert out["failure_class"] == "infra_failed" and out["passed"] is None, out
    assert out["error"]["class"] == "WorkerDied" and "died 2 times" in out["error"]["message"], out["error"]
    assert out["agent"]["worker_deaths"] == 2 and starts() == 2  # not run a third time
    fig = report["per_adapter"]["fake"]
    assert fig["failure_classes"] == {"infra_failed": 1} and fig["coverage"] == 0.0
    assert fig["coverage_line"] == "pass rate not measured over 0 of 1 tasks; 1 infrastructure failure"
    print("git worktree list after the repeated SIGKILL test:\n" + assert_clean(repo, tmp_path / "spawn"))


def test_hang_nonzero_exit_and_writes_outside_the_worktree(tmp_path, repo, farm):
    pids = tmp_path / "hang.pids"
    real_home = tmp_path / "real-home"
    real_home.mkdir()
    spec = write_spec(tmp_path / "spec.yaml", repo, [
        {"id": "hang", "text": f"hang {pids} stubborn", "timeout_s": 3, "check": "true"},
        {"id": "exit", "text": "exit", "check": "true"},
        {"id": "escape", "text": "escape", "check": "test ! -e ../escaped-parent.txt || true"},
        {"id": "ok", "text": "ok", "check": "grep -q 'hello, world' hello.py"}], **UNSANDBOXED)
    farm.worker(concurrency=2, unsandboxed=True, HOME=str(real_home), AWS_SECRET_ACCESS_KEY="aws-secret-123")
    res = farm.cli("run", str(spec), "--json", "--no-save")
    assert res.returncode in (0, 1), res.stderr
    by = outcomes_by_prompt(report_of(res))
    hang = by["hang"][0]
    # an agent that used its whole time is measured and failed (core/failure.py), not unmeasured
    assert hang["failure_mode"] == "runtime_error" and hang["failure_class"] == "agent_timeout"
    assert hang["passed"] is False
    assert hang["error"]["class"] == "AgentRunError"
    assert hang["error"]["message"] == "command: timed out after 3 s (the task's timeout_s; process group killed)"
    assert hang["agent"]["timed_out"] is True and hang["agent"]["wall_s"] < 3 + 2 + 5
    leader, child = map(int, pids.read_text().split())
    grandchild = int(Path(f"{pids}.grandchild").read_text())
    assert not any(pid_alive(p) for p in (leader, child, grandchild))  # the whole group, SIGTERM ignored or not
    ex = by["exit"][0]
    assert ex["failure_mode"] == "runtime_error" and ex["error"]["message"].startswith("command: exit code 3: boom")
    assert ex["failure_class"] == "agent_failed" and ex["passed"] is False
    assert by["ok"][0]["passed"] is True
    esc = by["escape"][0]
    assert esc["passed"] is True
    seen = json.loads(esc["output"])  # the environment the agent got: allow-listed, its own HOME
    assert "AWS_SECRET_ACCESS_KEY" not in seen and "EVALFARM_SPAWN_BROKER_URL" not in seen
    assert seen["HOME"] != str(real_home) and seen["HOME"].startswith(str(tmp_path / "spawn"))
    assert list(real_home.iterdir()) == []  # the worker's real HOME saw nothing
    assert not list(repo.rglob("escaped-*")) and not list(tmp_path.glob("escaped-*"))
    print("git worktree list after the hang/exit/escape test:\n" + assert_clean(repo, tmp_path / "spawn"))


def test_two_workers_on_one_repo_own_broker_and_leases(tmp_path, repo, farm):
    """12 agents that each take 3 s and commit in their worktree, on two workers of concurrency 2, with a
    visibility timeout of 2 s: no shared worktree, no index.lock failure, and no live task redelivered
    (its lease is renewed) although every task outlives the visibility timeout."""
    trace = tmp_path / "trace.log"
    n = 12
    spec = write_spec(tmp_path / "spec.yaml", repo, [
        {"id": f"t{i:02d}", "text": f"git {trace} 3", "check": "test \"$(git log -1 --format=%s)\" = 'fake agent edit'"}
        for i in range(n)], **UNSANDBOXED)
    for _ in range(2):
        farm.worker(concurrency=2, unsandboxed=True, EVALFARM_SPAWN_VISIBILITY_TIMEOUT="2")
    res = farm.cli("run", str(spec), "--detach", EVALFARM_SPAWN_VISIBILITY_TIMEOUT="2")
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    db0, db1 = redis.Redis.from_url(farm.url), redis.Redis.from_url(farm.spawn)
    # the agent items wait on the spawn queue of db 1, not on db 0; status sees them there
    assert wait_for(lambda: db1.llen("spawn") > 0, 10, "spawn tasks queued on db 1")
    assert db0.llen("spawn") == 0 and db0.llen("provider") == 0
    status = json.loads(farm.cli("status", run_id, "--json").stdout)
    assert status["in_broker"] > 0 and status["missing"] == 0
    done = farm.cli("wait", run_id, "--json", "--no-save", "--timeout", "120")
    assert done.returncode == 0, done.stderr
    outcomes = report_of(done)["outcomes"]
    assert len(outcomes) == n and all(o["passed"] for o in outcomes), [o["error"] for o in outcomes]
    assert len({o["agent"]["sandbox"] for o in outcomes}) == n  # every task had its own worktree
    starts = [line for line in trace.read_text().splitlines() if line.startswith("start")]
    assert len(starts) == n  # no task ran twice
    c = counts(farm.url, run_id)
    assert c["done"] == n and c["executed"] == n
    assert repo.joinpath(".git", "index.lock").exists() is False
    print("git worktree list after the two-worker test:\n" + assert_clean(repo, tmp_path / "spawn"))


def test_resume_sends_missing_agent_items_to_the_spawn_queue(tmp_path, repo, farm):
    spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": f"t{i}", "text": "ok", "check": "true"} for i in range(3)])
    res = farm.cli("run", str(spec), "--detach")
    run_id = res.stdout.strip()
    db1 = redis.Redis.from_url(farm.spawn)
    wait_for(lambda: db1.llen("spawn") == 3, 10, "three spawn tasks")
    db1.delete("spawn")  # the broker lost them (no worker had taken them)
    resumed = farm.cli("resume", run_id, "--detach")
    assert resumed.returncode == 0 and "dispatched 3 missing items" in resumed.stderr, resumed.stderr
    assert db1.llen("spawn") == 3
    farm.worker(concurrency=2)
    done = farm.cli("wait", run_id, "--json", "--no-save", "--timeout", "60")
    assert done.returncode == 0 and len(report_of(done)["outcomes"]) == 3
    assert_clean(repo, tmp_path / "spawn")


def test_resume_only_forgets_an_items_worker_deaths(redis_server):
    """The start counts that give up on an item whose workers keep dying (executors/celery/work.py) go
    with its result when `resume --only` runs it again (RedisStore.forget): its retries start afresh."""
    from evalfarm.executors.celery.store import RedisStore

    store = RedisStore(redis_server.url)
    store.create_run("r1", {"run_id": "r1", "total": 2})
    store.record("r1", [{"key": "k1", "adapter": "fake", "prompt_id": "p", "trial": 0, "passed": None,
                         "error": {"class": "WorkerDied", "message": "died"}}])
    assert [store.note_start("r1", "k1") for _ in range(3)] == [1, 2, 3] and store.note_start("r1", "k2") == 1
    store.forget("r1", [("k1", "fake")])
    assert store.note_start("r1", "k1") == 1 and store.note_start("r1", "k2") == 2  # only the forgotten item's


def test_an_infra_failed_item_is_retried_on_another_live_spawn_worker(tmp_path, repo, farm):
    """Issue 19: an infra_failed item is retried on another worker when there is one. Two spawn workers with
    their own sandbox dirs; the agent CLI cannot start on worker A (exit 127 when its HOME is under A's dir)
    and works on B. The item, taken by A first, is handed back to the spawn queue naming A, and B runs it:
    passed, the outcome names B and the one attempt that was infra_failed on A (on main: A ran it 1 + 2 times
    itself and it ended infra_failed)."""
    import sys

    from conftest import ROOT
    from providers_fixture import MockProviderProc

    log, go = tmp_path / "runs.log", tmp_path / "b-is-up"
    line = (f'case "$HOME" in */spawn-a/*) echo a >> {log}; while [ ! -e {go} ]; do sleep 0.1; done; '
            f'exec /nonexistent/agent-cli-7f3a;; esac; echo b >> {log}; sed -i s/hello/hi/ hello.py')
    server = MockProviderProc()
    try:
        adapter = {"id": "fake", "provider": "agent", "agent": "command", "model": "fake-1", "base_url": server.url,
                   "template": f"{sys.executable} {ROOT / 'tests' / 'agent_failclass.py'} {{base_url}} {{prompt}}"}
        spec = write_spec(tmp_path / "spec.yaml", repo, [{"id": "t", "text": line, "check": "grep -q hi hello.py"}],
                          adapters=[adapter], isolation="none")
        a = farm.worker(concurrency=1, unsandboxed=True, EVALFARM_SPAWN_DIR=str(tmp_path / "spawn-a"))
        res = farm.cli("run", str(spec), "--detach")
        assert res.returncode == 0, res.stderr
        run_id = res.stdout.strip()
        wait_for(lambda: log.exists() and log.read_text().split() == ["a"], 60, "worker A to start the agent")
        b = farm.worker(concurrency=1, unsandboxed=True, EVALFARM_SPAWN_DIR=str(tmp_path / "spawn-b"))
        live = redis.Redis.from_url(farm.url)
        wait_for(lambda: b.proc.pid in [json.loads(v or "{}").get("pid") for v in live.mget(
            list(live.scan_iter("ef:worker:spawn-*")) or ["-"])], 30, "worker B's heartbeat")
        go.touch()  # A's agent CLI now fails to start: infra_failed on A
        done = farm.cli("wait", run_id, "--json", "--no-save", "--timeout", "120")
        assert done.returncode == 0, done.stderr
        [out] = report_of(done)["outcomes"]
        assert out["failure_class"] == "passed" and out["passed"] is True, (out["error"], out.get("agent"))
        agent = out["agent"]
        names = {w: f"spawn-{w.proc.pid}@" for w in (a, b)}
        assert agent["worker"].startswith(names[b]), agent["worker"]
        [failed] = agent["infra_attempts"]
        assert failed["worker"].startswith(names[a]) and "exit code 127" in failed["reason"], failed
        assert agent["attempts"] == 2 and agent["retried"] == [failed["reason"]]
        assert log.read_text().split() == ["a", "b"]  # once on A (infra_failed), once on B (passed)
        c = counts(farm.url, run_id)
        assert c["done"] == 1 and c["executed"] == 1
        status = json.loads(farm.cli("status", run_id, "--json").stdout)
        assert status["duplicate_executions"] == 0
        assert "worker_deaths" not in agent  # a hand-over is not a dead worker
    finally:
        server.stop()
    assert_clean(repo, tmp_path / "spawn-a")
    assert_clean(repo, tmp_path / "spawn-b")
