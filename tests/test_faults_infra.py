"""Infrastructure faults are not model errors, all real (redis-server, workers, mock-provider):

- Redis SIGKILLed and restarted (appendonly) mid-run: no item gets an invented ConnectionError
  outcome, every item is counted once, the report equals a clean run's;
- with no limit configured the fleet limiter does not touch Redis on the call path.
"""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import yaml

from conftest import RedisServer, run_cli
from evalfarm import Runner, load_spec
from evalfarm.core.report.model import stable_view
from test_faults import counts, wait_for

ENV = {"EVALFARM_VISIBILITY_TIMEOUT": "10", "EVALFARM_MAX_IN_FLIGHT": "4"}
REDIS_ERRORS = ("ConnectionError", "TimeoutError", "RedisError", "BusyLoadingError", "ResponseError",
                "OutOfMemoryError", "InfrastructureError", "ReadOnlyError")


def provider_spec(tmp: Path, url: str, n: int) -> Path:
    lines = [json.dumps({"id": f"c{i:04d}", "text": f"case {i}", "expected_output_contains": [f"case {i}"]})
             for i in range(n)]
    (tmp / "d.jsonl").write_text("\n".join(lines) + "\n")
    (tmp / "s.yaml").write_text(yaml.safe_dump({"name": "infra", "dataset": "d.jsonl", "adapters": [
        {"id": "m", "model": "m", "base_url": url}]}))
    return tmp / "s.yaml"


def test_redis_restart_records_no_invented_errors(tmp_path, provider, start_worker):
    p = provider("--latency-ms", "200")
    spec = provider_spec(tmp_path, p.url, 600)  # 2 workers x 4 calls in flight at 200 ms: ~15 s
    server = RedisServer(tmp_path, appendonly=True)
    server.start()
    try:
        for _ in range(2):
            start_worker(server.url, concurrency=2, **ENV)
        res = run_cli("run", str(spec), "--detach", "--batch-size", "10", broker=server.url, **ENV)
        assert res.returncode == 0, res.stderr
        run_id = res.stdout.strip()
        wait_for(lambda: counts(server.url, run_id).get("done", 0) >= 60)
        server.stop(signal.SIGKILL)  # mid-run, no clean shutdown
        time.sleep(3)
        server.start()
        res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "120", broker=server.url,
                      timeout=200, **ENV)
        assert res.returncode == 0, res.stderr[-2000:]
        report = json.loads(res.stdout)
    finally:
        server.stop()
    invented = [o["error"] for o in report["outcomes"] if o.get("error")]
    assert invented == [], f"{len(invented)} outcomes are infrastructure errors, e.g. {invented[:2]}"
    keys = [o["key"] for o in report["outcomes"]]
    assert len(keys) == 600 and len(set(keys)) == 600
    clean = stable_view(Runner().run(load_spec(spec)).to_dict())
    view = stable_view(report)
    assert view["per_adapter"] == clean["per_adapter"]
    assert view["outcomes"] == clean["outcomes"]


def test_limiter_without_limits_never_waits_on_redis(tmp_path):
    """No limit configured: a call takes its slot without a Redis round trip, so a Redis that hangs
    (SIGSTOP) or is gone costs the call nothing; with a fleet limit, a dead Redis is an
    InfrastructureError (the batch is retried), never a ConnectionError recorded as the outcome."""
    import asyncio

    import pytest

    from evalfarm.executors.celery.limits import RedisLimiter
    from evalfarm.errors import InfrastructureError
    from evalfarm.providers.limits import Limits

    server = RedisServer(tmp_path)
    server.start()
    free = RedisLimiter(server.url, "free", Limits())
    capped = RedisLimiter(server.url, "capped", Limits(max_in_flight=2))

    async def calls(limiter: RedisLimiter, n: int) -> float:
        async def one() -> None:
            async with limiter.slot():
                await asyncio.sleep(0.01)

        t0 = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), 10)
        return time.monotonic() - t0

    async def scenario() -> None:
        await calls(free, 4)  # warm: connections made
        server.proc.send_signal(signal.SIGSTOP)  # Redis hangs: every read would block
        try:
            assert await calls(free, 200) < 1.0
        finally:
            server.proc.send_signal(signal.SIGCONT)
        server.stop(signal.SIGKILL)  # Redis gone
        assert await calls(free, 200) < 1.0
        with pytest.raises(InfrastructureError):
            await calls(capped, 1)

    try:
        asyncio.run(scenario())
    finally:
        server.stop()
