"""A full Redis (maxmemory, noeviction), all real (redis-server, workers, the CLI):

- a run that will not fit is refused before anything is stored (one line, exit 2);
- a plan that fails half-way, or whose coordinator dies, leaves no key without an expiry, and
  `resume` marks such a run failed with one clear line;
- Redis filling up mid-run: workers stay up and retry with a clear log line, the coordinator says
  what is happening, and once the operator raises maxmemory the run finishes by itself, exactly.
"""
from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import redis

from conftest import EVALFARM, env_for, run_cli
from test_faults import PLUGINS, check_exactly_once, counts, make_spec, wait_for
from test_faults_control import said


def squeeze(r: redis.Redis, room: int = 0) -> None:
    """Redis is full from now on: maxmemory at what it holds (plus ``room`` bytes)."""
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + room)


def run_keys(r: redis.Redis) -> dict[str, int]:
    """Every key evalfarm wrote for a run, with its TTL (-1: never expires)."""
    return {k.decode(): int(r.ttl(k)) for k in r.scan_iter("ef:run:*")}


def test_run_that_will_not_fit_is_refused(tmp_path, redis_server):
    r = redis.Redis.from_url(redis_server.url)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", "20mb")
    spec = make_spec(tmp_path, n=30000, adapter="slow:1")  # ~70 MB with results; the plan alone ~22 MB
    t0 = time.monotonic()
    res = run_cli("run", str(spec), "--no-save", "--timeout", "30", broker=redis_server.url, **PLUGINS)
    lines = said(res.stderr)
    assert res.returncode == 2 and len(lines) == 1, (res.returncode, res.stderr[-1500:])
    assert "needs about" in lines[0] and "maxmemory 20.0 MB" in lines[0] and "CONFIG SET maxmemory" in lines[0]
    assert time.monotonic() - t0 < 20
    assert [k for k in r.scan_iter("ef:*")] == []  # nothing left behind
    assert r.llen("provider") == 0


def planning(tmp_path, redis_server, delay_s: str, **streams) -> tuple[redis.Redis, subprocess.Popen]:
    """A 5,000-item run whose planning is slowed down, returned once part of its plan is stored."""
    r = redis.Redis.from_url(redis_server.url)
    spec = make_spec(tmp_path, n=5000, adapter="slow:1")
    proc = subprocess.Popen([*EVALFARM, "run", str(spec), "--no-save", "--batch-size", "100"],
                            env=env_for(redis_server.url, **PLUGINS, EVALFARM_FAILPOINT_PLAN_DELAY_S=delay_s),
                            **streams)
    wait_for(lambda: any(k.endswith(b":order") for k in r.scan_iter("ef:run:*")), timeout=30, every=0.02)
    return r, proc


def test_plan_failing_half_way_leaves_nothing_without_expiry(tmp_path, redis_server):
    r, proc = planning(tmp_path, redis_server, "0.3", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    squeeze(r)  # another tenant filled Redis while the plan was being stored
    _, err = proc.communicate(timeout=60)
    lines = said(err)
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, err[-1500:])
    assert "ran out of memory while storing the plan" in lines[0] and "partial plan is removed" in lines[0]
    keys = run_keys(r)
    assert all(ttl > 0 for ttl in keys.values()), keys  # nothing stays for good
    assert not [k for k in keys if k.endswith((":items", ":order"))], keys  # the partial plan is gone
    [state] = [r.get(k).decode() for k in keys if k.endswith(":state")]
    assert state == "failed"
    assert r.llen("provider") == 0


def test_coordinator_dying_while_planning_then_resume(tmp_path, redis_server):
    r, proc = planning(tmp_path, redis_server, "0.5", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    keys = run_keys(r)
    assert keys and all(ttl > 0 for ttl in keys.values()), keys  # a dead planner's keys expire
    run_id = next(k.split(":")[2] for k in keys)
    res = run_cli("resume", run_id, "--no-save", broker=redis_server.url, **PLUGINS)
    lines = said(res.stderr)
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "stopped while planning" in lines[0] and "marked failed" in lines[0] and "run the spec again" in lines[0]
    keys = run_keys(r)
    assert all(ttl > 0 for ttl in keys.values()) and not [k for k in keys if k.endswith((":items", ":order"))]
    assert r.get(f"ef:run:{run_id}:state") == b"failed"
    st = run_cli("status", run_id, "--json", broker=redis_server.url)
    assert json.loads(st.stdout)["state"] == "failed"


def test_redis_full_mid_run_workers_stay_and_run_finishes(tmp_path, redis_server, start_worker):
    r = redis.Redis.from_url(redis_server.url)
    spec = make_spec(tmp_path, n=2000, adapter="slow:20")
    workers = [start_worker(redis_server.url, concurrency=2, **PLUGINS) for _ in range(2)]
    proc = subprocess.Popen([*EVALFARM, "run", str(spec), "--no-save", "--json", "--batch-size", "20",
                             "--timeout", "120"],
                            env=env_for(redis_server.url, **PLUGINS, EVALFARM_STALL_NOTICE_S="4"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = wait_for(lambda: [x.decode() for x in r.zrange("ef:runs", 0, -1)]).pop()
    wait_for(lambda: counts(redis_server.url, run_id).get("done", 0) >= 300, every=0.02)
    squeeze(r)
    told: list[str] = []  # the coordinator's stderr, read as it comes
    reader = threading.Thread(target=lambda: told.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()

    def logs() -> str:
        return "".join(w.log.read_text() for w in workers)

    wait_for(lambda: "infrastructure_error_retrying" in logs() and "out of memory" in logs(), 60,
             "the workers to meet the full Redis")
    wait_for(lambda: any("Redis is at its memory limit" in line for line in told), 60,
             "the coordinator to say Redis is full")
    stuck = counts(redis_server.url, run_id)["done"]
    assert stuck < 2000
    assert [w.proc.poll() for w in workers] == [None, None]  # both workers are up
    assert "Unrecoverable" not in logs()
    r.config_set("maxmemory", 0)  # the operator makes room
    out = proc.stdout.read()
    proc.wait(120)
    reader.join(30)
    err = "".join(told)
    assert proc.returncode == 0, err[-2000:]
    assert "Redis is at its memory limit" in err and "Redis has room again" in err, err[-2000:]
    assert [w.proc.poll() for w in workers] == [None, None]
    check_exactly_once(json.loads(out), spec, 2000)
    assert counts(redis_server.url, run_id)["done"] == 2000


def test_wait_says_to_resume_when_the_broker_lost_items(tmp_path, redis_server, start_worker):
    """Items neither done, nor queued, nor in a worker's hands (the broker lost their messages, as
    when a full Redis refused to record a task before this fix): `wait` says so and names `resume`,
    which then finishes the run exactly."""
    spec = make_spec(tmp_path, n=200, adapter="slow:5")
    res = run_cli("run", str(spec), "--detach", "--batch-size", "20", broker=redis_server.url, **PLUGINS)
    run_id = res.stdout.strip()
    r = redis.Redis.from_url(redis_server.url)
    for _ in range(3):
        r.rpop("provider")  # three batches lost: 60 items nobody will run
    start_worker(redis_server.url, concurrency=2, **PLUGINS)
    waited = run_cli("wait", run_id, "--no-save", "--timeout", "15", broker=redis_server.url,
                     EVALFARM_STALL_NOTICE_S="2", **PLUGINS)
    assert waited.returncode == 2 and "not finished after 15 s" in waited.stderr, waited.stderr
    assert "has stalled at 140/200: 60 items are neither done, nor queued" in waited.stderr, waited.stderr
    assert f"'evalfarm resume {run_id}' dispatches them" in waited.stderr
    res = run_cli("resume", run_id, "--json", "--no-save", "--timeout", "60", broker=redis_server.url, **PLUGINS)
    assert res.returncode == 0, res.stderr
    check_exactly_once(json.loads(res.stdout), spec, 200)
