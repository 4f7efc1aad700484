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
