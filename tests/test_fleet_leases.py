"""The fleet limiter under load and faults (issue 17), all real (redis-server, workers, mock-provider):

- 2 workers with `run --concurrency 256` at 0 ms: no limiter error in the workers' logs (redis-py 8
  caps a connection pool at 100; the old limiter opened one connection per waiting call), every item
  called once, never more than 256 in flight;
- Redis restarted mid-run (appendonly) with `--concurrency 4` at 300 ms: the run goes on within
  seconds of Redis coming back (measured at the mock server), and the slots come back;
- a SIGSTOPped worker's slots return within the lease, and `wait` says who held them.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import yaml

from conftest import RedisServer, run_cli, wait_for

LIMITER_ERRORS = ("MaxConnectionsError", "Too many connections", "fleet limiter's Redis failed")


def suite(tmp: Path, url: str, n: int) -> Path:
    lines = [json.dumps({"id": f"c{i:04d}", "text": f"Say the number {i} please",
                         "expected_output_contains": [str(i)]}) for i in range(n)]
    (tmp / "d.jsonl").write_text("\n".join(lines) + "\n")
    (tmp / "s.yaml").write_text(yaml.safe_dump({"name": "leases", "dataset": "d.jsonl", "adapters": [
        {"id": "m", "model": "mock", "base_url": url}]}))
    return tmp / "s.yaml"


def test_256_in_flight_on_two_workers_never_runs_out_of_connections(tmp_path, provider, redis_server, start_worker):
    p = provider()
    workers = [start_worker(redis_server.url, concurrency=8, EVALFARM_MAX_IN_FLIGHT="256") for _ in range(2)]
    res = run_cli("run", str(suite(tmp_path, p.url, 1000)), "--no-save", "--json", "--concurrency", "256",
                  broker=redis_server.url, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout)
    logs = "".join(w.log.read_text(errors="replace") for w in workers)
    errors = [line for line in logs.splitlines() if any(e in line for e in LIMITER_ERRORS)]
    assert errors == [], f"{len(errors)} limiter errors in the workers' logs, e.g. {errors[:2]}"
    stats = p.stats()
    assert stats["requests"] == 1000, stats  # every item called once: no batch ran twice
    assert stats["max_in_flight"] <= 256, stats
    assert report["items_done"] == 1000 and report["per_adapter"]["m"]["errors"] == 0


def first_after(p, t: float) -> float | None:
    later = [r["t"] for r in p.stats_requests() if r["t"] > t]
    return min(later) - t if later else None


def test_a_redis_restart_mid_run_loses_no_slot(tmp_path, provider, start_worker):
    """appendonly Redis shut down and started again ~1 s later, mid-run, `--concurrency 4` at 300 ms:
    the releases made during the outage are not lost (slots held are re-asserted, the rest expire
    with their lease), so the run goes on within seconds of Redis coming back."""
    p = provider("--latency-ms", "300")
    server = RedisServer(tmp_path, appendonly=True)
    server.start()
    env = {"EVALFARM_VISIBILITY_TIMEOUT": "30"}
    try:
        start_worker(server.url, concurrency=4, EVALFARM_MAX_IN_FLIGHT="64", **env)
        res = run_cli("run", str(suite(tmp_path, p.url, 60)), "--detach", "--concurrency", "4",
                      "--batch-size", "5", broker=server.url, **env)
        assert res.returncode == 0, res.stderr
        run_id = res.stdout.strip()
        wait_for(lambda: p.stats()["requests"] >= 20, 60, "20 requests at the provider")
        server.stop()  # SIGTERM: Redis writes its appendonly file and exits
        time.sleep(1.0)  # the outage of the reproduction: ~1 s
        server.start()
        back = time.time()
        res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "45", broker=server.url, timeout=120, **env)
        assert res.returncode == 0, res.stderr[-2000:]
        report = json.loads(res.stdout)
    finally:
        server.stop()
    gap = first_after(p, back)
    assert gap is not None and gap < 5.0, gap
    assert report["items_done"] == 60 and not [o for o in report["outcomes"] if o.get("error")]
    print(f"\nRedis back -> next provider call: {gap:.2f} s")


def test_a_stopped_workers_slots_return_within_the_lease(tmp_path, provider, redis_server, start_worker):
    """Worker A, alone, holds a run's 4 slots and is SIGSTOPped: `status` names A and how long since it
    renewed; worker B, started then, gets the slots once A's lease (here 3 s) has run out."""
    p = provider("--latency-ms", "200")
    env = {"EVALFARM_LEASE_S": "3", "EVALFARM_VISIBILITY_TIMEOUT": "20"}
    a = start_worker(redis_server.url, concurrency=4, **env)
    res = run_cli("run", str(suite(tmp_path, p.url, 120)), "--detach", "--concurrency", "4", "--batch-size", "4",
                  broker=redis_server.url, **env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    wait_for(lambda: p.stats()["requests"] >= 12, 30, "worker A calling (it holds the run's slots)")
    os.killpg(a.proc.pid, signal.SIGSTOP)
    stopped = time.time()
    try:
        def said() -> str | None:
            out = run_cli("status", run_id, broker=redis_server.url, **env).stdout
            return out if "no renewal for" in out else None

        out = wait_for(said, 30, "status naming the stopped holder")
        assert f":{a.proc.pid} " in out and "of 4 fleet slots held" in out and "no renewal for" in out, out
        start_worker(redis_server.url, concurrency=4, **env)
        wait_for(lambda: first_after(p, stopped + 0.5), 30, "a request from worker B")
        took = first_after(p, stopped + 0.5) + 0.5
        assert took < 3 + 8, took  # the lease, plus B's start-up (~2-5 s here)
    finally:
        os.killpg(a.proc.pid, signal.SIGCONT)
    res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "90", broker=redis_server.url, timeout=120, **env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["items_done"] == 120
    print(f"\nSIGSTOP of the holder -> the next provider call (from a worker started then): {took:.2f} s")


def test_a_resumed_worker_takes_back_only_free_slots(tmp_path, provider, redis_server, start_worker):
    """Worker A holds a run's 4 slots and is SIGSTOPped; once its lease (2 s) ran out, worker B takes
    them. A, resumed, must not re-state its old 4 slots beside B's and send on them (8 in flight for a
    cap of 4): a lease that ran out by its own clock hands out nothing until Redis says what is free."""
    p = provider("--latency-ms", "300")
    env = {"EVALFARM_LEASE_S": "2", "EVALFARM_VISIBILITY_TIMEOUT": "60"}
    a = start_worker(redis_server.url, concurrency=4, **env)
    res = run_cli("run", str(suite(tmp_path, p.url, 160)), "--detach", "--concurrency", "4", "--batch-size", "4",
                  broker=redis_server.url, **env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    wait_for(lambda: p.stats()["requests"] >= 12, 30, "worker A calling (it holds the run's slots)")
    os.killpg(a.proc.pid, signal.SIGSTOP)
    stopped = time.time()
    try:
        start_worker(redis_server.url, concurrency=4, **env)
        wait_for(lambda: first_after(p, stopped + 0.5), 30, "a request from worker B")
        b_started = p.stats()["requests"]
        wait_for(lambda: p.stats()["requests"] >= b_started + 8, 30, "worker B holding the slots")
    finally:
        os.killpg(a.proc.pid, signal.SIGCONT)
    res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "120", broker=redis_server.url, timeout=150, **env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["items_done"] == 160
    stats = p.stats()
    assert stats["max_in_flight"] <= 4, stats  # the cap held across the stop and the resume
