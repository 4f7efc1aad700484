"""`evalfarm cancel RUN` reaches an agent task already running on a spawn worker (issue 18: nothing
outlives a task). The hostile `tree` probe (tests/agent_probe.py: ignores SIGTERM, a SIGTERM-proof
child, a setsid child and a double-forked setsid grandchild) runs sandboxed on a real spawn worker;
after the cancel, within a few seconds, no process of its tree is left (seen from the host's /proc),
its relay dir and checkout are gone, the item has no result (`resume` would run it again), `status`
and `wait` say cancelled, and the same worker runs the next run's agent. Real redis-server, real
workers, real git, real bwrap."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
import redis

from conftest import run_cli, wait_for
from spawn_support import assert_clean, make_repo, pid_alive, report_of, spawn_dirs, spawn_env
from test_agent_seal import probe_adapter, write
from test_agent_seal_stop import new_token, relay_dirs, with_token


@pytest.fixture(params=["own-spawn-broker", "shared-broker"])
def farm(request, tmp_path, redis_server, start_worker):
    """The spawn queue on its own broker database, or on the main broker (where the agent's message sits
    in the same ``unacked`` hash as the provider batches: the cancel must not say it came too late)."""
    main = redis_server.url
    env = spawn_env(tmp_path, **({"EVALFARM_SPAWN_BROKER_URL": main[:-1] + "1"}
                                 if request.param == "own-spawn-broker" else {}))
    start_worker(main, pool="aggregate", concurrency=1, **env)

    class Farm:
        url = main

        @staticmethod
        def worker(concurrency: int = 1):
            return start_worker(main, pool="spawn", concurrency=concurrency, **env)

        @staticmethod
        def cli(*args: str, timeout: float = 120):
            return run_cli(*args, broker=main, cwd=tmp_path, timeout=timeout, **env)

    return Farm


def test_cancel_kills_a_running_sandboxed_agent_on_a_spawn_worker_and_the_worker_runs_the_next(tmp_path, farm):
    token = new_token()
    repo = make_repo(tmp_path / "repo")
    spec = write(tmp_path / "s.yaml", repo, probe_adapter("tree", token),
                 prompts=[{"id": "t1", "text": "probe", "check": "true", "timeout_s": 300}])
    worker = farm.worker(concurrency=1)
    res = farm.cli("run", str(spec), "--detach")
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        seen = wait_for(lambda: (p := with_token(token)) and len(p) >= 6 and p, 60, "the agent's tree")
        relays = relay_dirs(seen)
        assert len(relays) == 1 and len(spawn_dirs(tmp_path / "spawn")) == 1
        t0 = time.monotonic()
        cancelled = farm.cli("cancel", run_id)
        assert cancelled.returncode == 0 and f"cancelled {run_id}" in cancelled.stdout, cancelled.stderr
        wait_for(lambda: not with_token(token), 10, "the agent's tree to be gone after the cancel")
        gone_s = time.monotonic() - t0
        wait_for(lambda: not any(d.exists() for d in relays) and not spawn_dirs(tmp_path / "spawn"), 10,
                 "the relay dir and the checkout to be removed")
        cleaned_s = time.monotonic() - t0
    finally:
        for pid in with_token(token):
            os.kill(pid, signal.SIGKILL)
    assert gone_s < 5, gone_s  # a poll (0.5 s) and the kill: not the agent's 300 s
    assert_clean(repo, tmp_path / "spawn")
    status = json.loads(farm.cli("status", run_id, "--json").stdout)
    assert status["state"] == "cancelled" and status["done"] == 0 and status["errors"] == 0, status
    # the stopped start is taken back: a later `resume` of the item is not counted as after a dead worker
    starts = redis.Redis.from_url(farm.url).hgetall(f"ef:run:{run_id}:starts")
    wait_for(lambda: set(redis.Redis.from_url(farm.url).hgetall(f"ef:run:{run_id}:starts").values()) == {b"0"}, 10,
             f"the start count taken back (was {starts})")
    waited = farm.cli("wait", run_id, "--no-save", "--timeout", "20")
    assert waited.returncode == 1 and f"run {run_id} was cancelled at 0/1 items" in waited.stderr, waited.stderr
    log = worker.log.read_text()
    assert "batch_stopped_by_cancel" in log and "Traceback" not in log, log[-3000:]
    # the same worker process takes the next run's agent and finishes it
    quick = write(tmp_path / "q.yaml", repo, probe_adapter("peek", "0"),
                  prompts=[{"id": "q1", "text": "probe", "check": "true"}])
    nxt = farm.cli("run", str(quick), "--json", "--no-save", "--timeout", "90")
    assert nxt.returncode == 0, nxt.stderr
    [o] = report_of(nxt)["outcomes"]
    assert o["passed"] is True and o["error"] is None and o["agent"]["isolation"] == "sandbox", o
    assert pid_alive(worker.proc.pid)
    assert_clean(repo, tmp_path / "spawn")
    print(f"\ncancel -> agent tree gone in {gone_s:.2f} s, relay dir and checkout gone in {cleaned_s:.2f} s")
