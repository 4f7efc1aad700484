"""A budget survives Redis restores (issue 17, item 2 of the fault probe), all real (redis-server,
workers, mock-provider): each worker keeps its own record of what it spent and re-states it, so a
Redis restored from an older snapshot cannot make the fleet spend the budget again; a record lost
for good (its worker is gone) stops the run with one line.

Every prompt is 99 words of "abc" plus its id: 100 tokens in, 100 out; at 2,000 USD per million
tokens each call costs exactly $0.40.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import redis

from conftest import RedisServer, run_cli, wait_for

CALL_USD = 0.4
ENV = {"EVALFARM_MAX_IN_FLIGHT": "4", "EVALFARM_VISIBILITY_TIMEOUT": "3"}  # batches take < 1 s


def priced(tmp: Path, url: str, n: int) -> Path:
    words = " ".join(["abc"] * 99)
    lines = ["name: spend", "adapters:", f"  - {{id: small, model: m1, base_url: '{url}', params: {{max_tokens: 100}}, "
             "price: {input: 2000, output: 2000}}", "prompts:"]
    lines += [f"  - {{id: p{i:03d}, text: '{words} w{i}'}}" for i in range(n)]
    (tmp / "spec.yaml").write_text("\n".join(lines) + "\n")
    return tmp / "spec.yaml"


def test_a_restore_from_an_older_snapshot_does_not_spend_the_budget_again(tmp_path, provider, start_worker):
    """--max-cost 80 at $0.40 a call (200 calls); SAVE after ~40 calls, SHUTDOWN NOSAVE after ~100,
    Redis started again from that snapshot: the counter reads the whole spend again within a second
    and the provider sees at most the budget plus the calls in flight."""
    p = provider("--latency-ms", "200")
    server = RedisServer(tmp_path)
    server.start()
    try:
        for _ in range(2):
            start_worker(server.url, concurrency=2, **ENV)
        res = run_cli("run", str(priced(tmp_path, p.url, 400)), "--detach", "--max-cost", "80", "--force",
                      "--batch-size", "4", broker=server.url, **ENV)
        assert res.returncode == 0, res.stderr
        run_id = res.stdout.strip()
        r = redis.Redis.from_url(server.url)
        wait_for(lambda: p.stats()["requests"] >= 40, 60, "40 calls")
        r.save()
        wait_for(lambda: p.stats()["requests"] >= 100, 60, "100 calls")
        at_shutdown = p.stats()["requests"]
        try:
            r.shutdown(nosave=True)
        except redis.exceptions.ConnectionError:
            pass
        server.proc.wait(10)
        server.start()  # loads the snapshot taken at ~40 calls
        res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "90", broker=server.url, timeout=150, **ENV)
        report = json.loads(res.stdout) if res.stdout.strip() else {}
        spent = int(redis.Redis.from_url(server.url).hget(f"ef:run:{run_id}:counts", "spent_nusd") or 0)
    finally:
        server.stop()
    requests = p.stats()["requests"]
    assert res.returncode == 1 and report.get("stopped") == "budget", res.stderr[-2000:]
    in_flight = 2 * 4  # two workers, 4 calls in flight each
    assert requests <= 200 + in_flight, (requests, at_shutdown)
    assert spent == round(requests * CALL_USD * 1e9), (spent / 1e9, requests)  # every call, counted once
    print(f"\nrestore at ~40 of {at_shutdown} calls: {requests} requests at the provider for a budget of 200 calls; "
          f"counter ${spent / 1e9:.2f}")


def test_a_lost_record_stops_the_run_with_one_line(tmp_path, provider, redis_server, start_worker):
    """A dead worker's record found lower than it was seen (a restore lost it, and nobody can state it
    again): the run stops with one line; `resume` after checking goes on from what the store holds."""
    p = provider("--latency-ms", "100")
    for _ in range(2):  # both see the dead worker's record; the resume makes both take the store as it is
        start_worker(redis_server.url, concurrency=2, **ENV)
    res = run_cli("run", str(priced(tmp_path, p.url, 300)), "--detach", "--max-cost", "1000", "--force",
                  "--batch-size", "4", broker=redis_server.url, **ENV)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    r = redis.Redis.from_url(redis_server.url)
    key = f"ef:run:{run_id}:spend"
    wait_for(lambda: r.exists(key), 30, "the first spend record")
    r.hset(key, "gone-host:4242:abcdef", 20 * 10**9)  # a worker that spent $20, then died
    seen_at = p.stats()["requests"]
    wait_for(lambda: p.stats()["requests"] >= seen_at + 8, 30, "calls after the dead worker's record")
    r.hset(key, "gone-host:4242:abcdef", 5 * 10**9)  # restored from before its last calls
    res = run_cli("wait", run_id, "--no-save", "--timeout", "60", broker=redis_server.url, timeout=90, **ENV)
    lines = [x for x in res.stderr.splitlines() if "lost spend records" in x]
    assert res.returncode != 0 and len(lines) == 1, res.stderr[-2000:]
    assert "worker gone-host:4242's record reads $5.000000, $20.000000 was seen" in lines[0], lines[0]
    assert "resume after checking" in lines[0]
    stopped_at = p.stats()["requests"]
    time.sleep(0.5)
    assert p.stats()["requests"] - stopped_at <= 2 * 4  # at most what was in flight
    res = run_cli("resume", run_id, broker=redis_server.url, **ENV)
    assert res.returncode == 0, res.stderr
    res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "90", broker=redis_server.url, timeout=120, **ENV)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["items_done"] == 300
