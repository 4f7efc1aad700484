"""Fleet-wide provider limits and the shared response cache, across real worker processes."""
from __future__ import annotations

import json
import time
import urllib.request

import yaml

from conftest import run_cli
from providers_fixture import MockProviderProc


def spec(tmp, url: str, n: int, first: str = "", **adapter) -> str:
    lines = [json.dumps({"id": f"c{i:03d}", "text": (first if i == 0 else "") + f" case {i}"}) for i in range(n)]
    (tmp / "d.jsonl").write_text("\n".join(lines) + "\n")
    (tmp / "s.yaml").write_text(yaml.safe_dump({"name": "fleet", "dataset": "d.jsonl", "adapters": [
        {"id": "m", "model": "m", "base_url": url, **adapter}]}))
    return str(tmp / "s.yaml")


def log_of(p: MockProviderProc) -> list[tuple[float, int]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{p.port}/stats?log=1", timeout=5) as r:
        return sorted(json.loads(r.read())["log"])


def test_in_flight_limit_holds_across_workers(tmp_path, provider, redis_server, start_worker):
    p = provider("--latency-ms", "300")
    for _ in range(2):
        start_worker(redis_server.url, concurrency=4, EVALFARM_MAX_IN_FLIGHT="64")
    res = run_cli("run", spec(tmp_path, p.url, 24, max_in_flight=3), "--no-save", "--batch-size", "3",
                  broker=redis_server.url)
    assert res.returncode == 0, res.stderr
    assert p.stats()["max_in_flight"] == 3  # 2 workers x 64 allowed locally; the fleet cap held


def test_requests_per_minute_holds_across_workers(tmp_path, provider, redis_server, start_worker):
    p = provider()
    for _ in range(2):
        start_worker(redis_server.url, concurrency=4)
    t0 = time.monotonic()
    res = run_cli("run", spec(tmp_path, p.url, 12, requests_per_minute=120), "--no-save", "--batch-size", "2",
                  broker=redis_server.url)
    assert res.returncode == 0, res.stderr
    arrivals = [t for t, _ in log_of(p)]
    assert len(arrivals) == 12
    # 2 requests/s with a burst of 2: the 12th request cannot arrive before ~5 s after the first
    assert arrivals[-1] - arrivals[0] >= 4.5
    assert time.monotonic() - t0 < 30


def test_a_429_pauses_the_whole_fleet(tmp_path, provider, redis_server, start_worker):
    p = provider("--latency-ms", "100")
    for _ in range(2):
        start_worker(redis_server.url, concurrency=4, EVALFARM_MAX_IN_FLIGHT="4")
    res = run_cli("run", spec(tmp_path, p.url, 160, first="[[fail:1:429]]"), "--no-save", "--json",
                  "--batch-size", "10", broker=redis_server.url)
    assert res.returncode == 0, res.stderr
    log = log_of(p)
    [(t429, _)] = [entry for entry in log if entry[1] == 429]
    # Retry-After: 1. Requests in flight finish; new ones from either worker wait (the pause
    # is seen within 0.2 s), then resume.
    during = [t for t, _ in log if t429 + 0.35 < t < t429 + 0.95]
    assert during == [], during
    assert any(t > t429 + 0.95 for t, _ in log)
    report = json.loads(res.stdout)
    assert report["per_adapter"]["m"]["errors"] == 0 and report["per_adapter"]["m"]["items"] == 160


def test_cache_shared_by_workers_keeps_trials_independent(tmp_path, provider, redis_server, start_worker):
    p = provider()
    start_worker(redis_server.url, concurrency=2)
    start_worker(redis_server.url, concurrency=2)
    s = spec(tmp_path, p.url, 10, price={"input": 1.0, "output": 1.0})
    first = run_cli("run", s, "--no-save", "--json", "--cache", "--trials", "2", broker=redis_server.url)
    assert first.returncode == 0, first.stderr
    assert p.stats()["requests"] == 20  # trials are separate requests, never served from each other
    second = run_cli("run", s, "--no-save", "--json", "--cache", "--trials", "2", broker=redis_server.url)
    assert p.stats()["requests"] == 20  # every response came from the cache
    r1, r2 = json.loads(first.stdout), json.loads(second.stdout)
    assert r2["per_adapter"]["m"]["cached"] == 20 and r2["per_adapter"]["m"]["cost_usd"] == 0.0
    assert r1["per_adapter"]["m"]["cost_usd"] > 0 and r1["per_adapter"]["m"]["cached"] == 0
    assert [o["output"] for o in r1["outcomes"]] == [o["output"] for o in r2["outcomes"]]
    third = run_cli("run", s, "--no-save", "--json", "--trials", "2", broker=redis_server.url)  # no --cache
    assert third.returncode == 0 and p.stats()["requests"] == 40


def test_cache_embedded_uses_a_local_file(tmp_path, provider):
    p = provider()
    s = spec(tmp_path, p.url, 5)
    for _ in range(2):
        res = run_cli("run", s, "--no-save", "--cache", "--state-dir", str(tmp_path / "st"))
        assert res.returncode == 0, res.stderr
    assert p.stats()["requests"] == 5 and (tmp_path / "st" / "cache.sqlite").is_file()
