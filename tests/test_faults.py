"""Crash safety, all real: worker SIGKILL, Redis restart, coordinator death, duplicate delivery.

Every test checks the same two things at the end: each item is in the report
exactly once, and the report equals what a clean (embedded) run produces.
"""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import redis

from conftest import EVALFARM, RedisServer, env_for, run_cli, wait_for  # noqa: F401  (fault tests import it)
from evalfarm import Runner, load_spec
from evalfarm.core.report.model import stable_view

PLUGINS = {"EVALFARM_PLUGINS": "ef_test_adapters", "EVALFARM_VISIBILITY_TIMEOUT": "3",
           "EVALFARM_MAX_IN_FLIGHT": "8"}


def make_spec(tmp: Path, n: int = 400, adapter: str = "slow:40") -> Path:
    lines = "\n".join(json.dumps({"id": f"p{i:04d}", "text": f"prompt {i}", "expected_output_contains": [str(i)]})
                      for i in range(n))
    (tmp / "d.jsonl").write_text(lines + "\n")
    (tmp / "s.yaml").write_text(f"name: faults\ndataset: d.jsonl\nadapters: ['{adapter}']\n")
    return tmp / "s.yaml"


def counts(url: str, run_id: str) -> dict[str, int]:
    r = redis.Redis.from_url(url)
    return {k.decode(): int(v) for k, v in r.hgetall(f"ef:run:{run_id}:counts").items()}


def clean_view(spec_path: Path) -> dict:
    import ef_test_adapters  # noqa: F401  registers slow:* for the in-process reference run
    return stable_view(Runner().run(load_spec(spec_path)).to_dict())


def check_exactly_once(report: dict, spec_path: Path, n: int) -> None:
    keys = [o["key"] for o in report["outcomes"]]
    assert len(keys) == n and len(set(keys)) == n
    view = stable_view(report)
    ref = clean_view(spec_path)
    assert view["per_adapter"] == ref["per_adapter"]
    assert view["outcomes"] == ref["outcomes"]


def wait_run(run_id: str, url: str, *extra: str, timeout: int = 90):
    """`evalfarm wait`; on failure the assertion message carries `evalfarm status` for diagnosis."""
    res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", str(timeout), *extra, broker=url,
                  timeout=timeout + 60, **PLUGINS)
    if res.returncode != 0:
        status = run_cli("status", run_id, broker=url).stdout
        raise AssertionError(f"wait exited {res.returncode}: {res.stderr[-500:]}\n{status}")
    return res


def detach(spec: Path, url: str, *extra: str, **env: str) -> str:
    res = run_cli("run", str(spec), "--detach", "--batch-size", "20", *extra, broker=url, **{**PLUGINS, **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_sigkill_worker_mid_run(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path)
    a = start_worker(redis_server.url, concurrency=2, **PLUGINS)
    run_id = detach(spec, redis_server.url)
    wait_for(lambda: counts(redis_server.url, run_id).get("done", 0) >= 60)
    a.kill(signal.SIGKILL)
    done_at_kill = counts(redis_server.url, run_id)["done"]
    assert done_at_kill < 400
    start_worker(redis_server.url, concurrency=2, **PLUGINS)
    res = wait_run(run_id, redis_server.url)
    check_exactly_once(json.loads(res.stdout), spec, 400)
    c = counts(redis_server.url, run_id)
    assert c["done"] == 400 and c["executed"] >= 400


def test_redis_restart_mid_run(tmp_path, start_worker):
    server = RedisServer(tmp_path, appendonly=True)
    server.start()
    try:
        spec = make_spec(tmp_path)
        start_worker(server.url, concurrency=2, **PLUGINS)
        run_id = detach(spec, server.url)
        wait_for(lambda: counts(server.url, run_id).get("done", 0) >= 60)
        server.stop(signal.SIGKILL)  # no clean shutdown: up to a second of writes may be lost
        time.sleep(1.5)
        server.start()
        res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "45", broker=server.url, **PLUGINS)
        if res.returncode != 0:  # the broker may have lost a message: resume finishes the run
            assert "not finished" in res.stderr, res.stderr
            res = run_cli("resume", run_id, "--json", "--no-save", "--timeout", "90", broker=server.url, **PLUGINS)
        assert res.returncode == 0, res.stderr
        check_exactly_once(json.loads(res.stdout), spec, 400)
    finally:
        server.stop()


def test_coordinator_killed_then_status_and_resume(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path, adapter="slow:5")
    start_worker(redis_server.url, concurrency=2, **PLUGINS)
    proc = subprocess.Popen([*EVALFARM, "run", str(spec), "--batch-size", "20", "--no-save", "--json"],
                            env=env_for(redis_server.url, **PLUGINS, EVALFARM_FAILPOINT_DISPATCH_DELAY_S="0.3"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    r = redis.Redis.from_url(redis_server.url)
    run_id = wait_for(lambda: [x.decode() for x in r.zrange("ef:runs", 0, -1)]).pop()
    wait_for(lambda: counts(redis_server.url, run_id).get("done", 0) >= 40)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    time.sleep(2)  # let the workers drain what was dispatched
    st = run_cli("status", run_id, "--json", broker=redis_server.url)
    assert st.returncode == 0, st.stderr
    info = json.loads(st.stdout)
    assert info["state"] == "running" or info["state"] == "dispatching"
    assert 40 <= info["done"] < 400 and info["missing"] > 0 and info["report_ready"] is False
    human = run_cli("status", run_id, broker=redis_server.url).stdout
    assert f"evalfarm resume {run_id}" in human and f"{info['done']}/400 done" in human
    res = run_cli("resume", run_id, "--json", "--no-save", "--timeout", "120", broker=redis_server.url, **PLUGINS)
    assert res.returncode == 0, res.stderr
    assert f"dispatched {info['missing']} missing items" in res.stderr
    check_exactly_once(json.loads(res.stdout), spec, 400)
    assert counts(redis_server.url, run_id)["executed"] == 400  # nothing ran twice


def test_task_delivered_twice_is_counted_once(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path, n=200, adapter="slow:5")
    run_id = detach(spec, redis_server.url)  # no worker yet: the batches wait in the queue
    r = redis.Redis.from_url(redis_server.url)
    queued = r.lrange("provider", 0, -1)
    assert len(queued) == 10
    for message in queued:  # every batch message delivered a second time
        r.lpush("provider", message)
    start_worker(redis_server.url, concurrency=4, **PLUGINS)
    res = wait_run(run_id, redis_server.url)
    report = json.loads(res.stdout)
    check_exactly_once(report, spec, 200)
    c = counts(redis_server.url, run_id)
    assert c["done"] == 200 and report["per_adapter"]["slow:5"]["items"] == 200


def test_cancel_then_resume(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path, n=200, adapter="slow:5")
    run_id = detach(spec, redis_server.url)
    res = run_cli("cancel", run_id, broker=redis_server.url)
    assert res.returncode == 0 and f"cancelled {run_id} at 0/200" in res.stdout
    start_worker(redis_server.url, concurrency=4, **PLUGINS)
    waited = run_cli("wait", run_id, "--timeout", "20", broker=redis_server.url)
    assert waited.returncode == 1 and "was cancelled" in waited.stderr
    assert counts(redis_server.url, run_id).get("done", 0) == 0  # workers skipped the cancelled batches
    res = run_cli("resume", run_id, "--json", "--no-save", "--timeout", "60", broker=redis_server.url, **PLUGINS)
    assert res.returncode == 0, res.stderr
    check_exactly_once(json.loads(res.stdout), spec, 200)


def test_task_time_limit_is_enforced_inside_the_batch(tmp_path, redis_server, start_worker):
    """Celery's thread pool ignores time limits: the batch enforces the pool's limit itself."""
    spec = make_spec(tmp_path, n=6, adapter="slow:4000")
    start_worker(redis_server.url, concurrency=2, EVALFARM_TASK_TIME_LIMIT="1", **PLUGINS)
    res = run_cli("run", str(spec), "--no-save", "--json", "--timeout", "60", broker=redis_server.url, **PLUGINS)
    assert res.returncode == 3, res.stderr  # every item ran out of time: nothing measured
    report = json.loads(res.stdout)
    assert {o["error"]["class"] for o in report["outcomes"]} == {"DeadlineExceeded"}
    assert report["duration_s"] < 4  # the 4 s calls were cut at 1 s
