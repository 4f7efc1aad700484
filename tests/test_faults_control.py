"""Run control under races and lost data, all real (redis-server, worker processes, the CLI):

- a cancel that arrives while the coordinator dispatches (or resumes) stays cancelled, and the
  attached command says so at once;
- a cancel that comes after the last batch left, or after the run finished, says it came too late;
- two `resume` at once: one dispatches, the other refuses (nothing is sent twice);
- Redis restarted without its data: `wait` and an attached `run` say the run vanished, not hang.
"""
from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
from collections import Counter

import redis

from conftest import EVALFARM, RedisServer, env_for, run_cli
from test_faults import PLUGINS, check_exactly_once, counts, detach, make_spec, wait_for


def said(stderr: str) -> list[str]:
    """What a command told the user on stderr, but the 'connecting to ...' line every farm command prints."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("evalfarm: connecting to ")]


def state_of(url: str, run_id: str) -> str | None:
    raw = redis.Redis.from_url(url).get(f"ef:run:{run_id}:state")
    return raw.decode() if raw else None


def queued_item_keys(url: str) -> Counter:
    """Item keys carried by batch messages in the provider queue (read raw, not through evalfarm)."""
    out: Counter = Counter()
    for raw in redis.Redis.from_url(url).lrange("provider", 0, -1):
        msg = json.loads(raw)
        body = msg["body"]
        if msg["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        out.update(args[1])
    return out


def spawn(*args: str, url: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([*EVALFARM, *args], env=env_for(url, **{**PLUGINS, **env}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_id_of(url: str) -> str:
    r = redis.Redis.from_url(url)
    return wait_for(lambda: [x.decode() for x in r.zrange("ef:runs", 0, -1)]).pop()


def exits_within(proc: subprocess.Popen, seconds: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"still running {seconds:.0f} s later; stderr so far: {err[-400:]!r}")
    return proc.returncode, out, err


def test_cancel_during_dispatch_stays_cancelled(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path, n=400, adapter="slow:5")
    start_worker(redis_server.url, concurrency=2, **PLUGINS)
    proc = spawn("run", str(spec), "--batch-size", "10", "--no-save", "--timeout", "30", url=redis_server.url,
                 EVALFARM_FAILPOINT_DISPATCH_DELAY_S="0.2")  # 40 batches: dispatch lasts ~8 s
    run_id = run_id_of(redis_server.url)
    wait_for(lambda: counts(redis_server.url, run_id).get("done", 0) >= 20)
    assert state_of(redis_server.url, run_id) == "dispatching"
    cancelled = run_cli("cancel", run_id, broker=redis_server.url)
    assert cancelled.returncode == 0, cancelled.stderr
    code, _, err = exits_within(proc, 5)  # the attached run notices within a poll, not after dispatch
    assert code == 1 and f"run {run_id} was cancelled" in err, (code, err)
    time.sleep(2)  # the old coordinator would have overwritten the state by now
    assert state_of(redis_server.url, run_id) == "cancelled"
    done = counts(redis_server.url, run_id)["done"]
    assert done < 400
    # resume picks up from there and finishes exactly
    res = run_cli("resume", run_id, "--json", "--no-save", "--timeout", "60", broker=redis_server.url, **PLUGINS)
    assert res.returncode == 0, res.stderr
    check_exactly_once(json.loads(res.stdout), spec, 400)


def test_cancel_during_resume_stays_cancelled(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path, n=400, adapter="slow:5")
    run_id = detach(spec, redis_server.url)
    assert run_cli("cancel", run_id, broker=redis_server.url).returncode == 0
    redis.Redis.from_url(redis_server.url).delete("provider")  # the cancelled run's batches are gone
    start_worker(redis_server.url, concurrency=2, **PLUGINS)
    proc = spawn("resume", run_id, "--no-save", "--timeout", "30", url=redis_server.url,
                 EVALFARM_FAILPOINT_DISPATCH_DELAY_S="0.2")
    wait_for(lambda: counts(redis_server.url, run_id).get("done", 0) >= 20)
    assert run_cli("cancel", run_id, broker=redis_server.url).returncode == 0
    code, _, err = exits_within(proc, 5)
    assert code == 1 and f"run {run_id} was cancelled" in err, (code, err)
    time.sleep(2)
    assert state_of(redis_server.url, run_id) == "cancelled"


def test_cancel_too_late_says_so(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path, n=20, adapter="slow:5000")
    start_worker(redis_server.url, concurrency=4, **PLUGINS)
    run_id = detach(spec, redis_server.url, "--batch-size", "5")
    r = redis.Redis.from_url(redis_server.url)
    wait_for(lambda: r.llen("provider") == 0 and r.hlen("unacked") == 4)  # every batch is in a worker's hands
    late = run_cli("cancel", run_id, broker=redis_server.url)
    assert "too late" in late.stdout + late.stderr, (late.returncode, late.stdout, late.stderr)
    waited = run_cli("wait", run_id, "--no-save", "--timeout", "30", broker=redis_server.url, **PLUGINS)
    assert "too late" in waited.stderr, (waited.returncode, waited.stderr)
    assert waited.returncode == 0  # the run did finish: every item measured, its own exit code
    after = run_cli("cancel", run_id, broker=redis_server.url)  # after the run finished
    assert after.returncode == 2 and len(said(after.stderr)) == 1 and "too late" in after.stderr, after.stderr


def test_two_resumes_at_once_one_dispatches(tmp_path, redis_server, start_worker):
    spec = make_spec(tmp_path, n=400, adapter="slow:5")
    proc = spawn("run", str(spec), "--batch-size", "10", "--no-save", url=redis_server.url,
                 EVALFARM_FAILPOINT_DISPATCH_DELAY_S="0.05")
    run_id = run_id_of(redis_server.url)
    wait_for(lambda: sum(queued_item_keys(redis_server.url).values()) >= 60)
    proc.send_signal(signal.SIGKILL)  # the coordinator dies mid-dispatch; no worker runs yet
    proc.wait(10)
    before = sum(queued_item_keys(redis_server.url).values())
    assert before < 400
    # each resume dispatches ~34 batches over ~10 s: longer than a second resume waits for the lock (5.5 s)
    a = spawn("resume", run_id, "--detach", url=redis_server.url, EVALFARM_FAILPOINT_DISPATCH_DELAY_S="0.3")
    time.sleep(0.5)
    b = spawn("resume", run_id, "--detach", url=redis_server.url, EVALFARM_FAILPOINT_DISPATCH_DELAY_S="0.3")
    results = [exits_within(p, 60) for p in (a, b)]
    codes = sorted(code for code, _, _ in results)
    queued = queued_item_keys(redis_server.url)
    assert max(queued.values()) == 1, f"{sum(queued.values()) - len(queued)} items queued twice; {results}"
    assert len(queued) == 400
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    assert f"run {run_id} is being resumed" in refused and len(said(refused)) == 1, refused
    start_worker(redis_server.url, concurrency=4, **PLUGINS)
    res = run_cli("wait", run_id, "--json", "--no-save", "--timeout", "60", broker=redis_server.url, **PLUGINS)
    assert res.returncode == 0, res.stderr
    check_exactly_once(json.loads(res.stdout), spec, 400)
    assert counts(redis_server.url, run_id)["executed"] == 400  # nothing paid twice


def test_redis_lost_its_data_wait_and_run_say_so(tmp_path, start_worker):
    server = RedisServer(tmp_path, appendonly=False)
    server.start()
    try:
        spec = make_spec(tmp_path, n=400, adapter="slow:300")  # ~9 s on 2 task threads
        start_worker(server.url, concurrency=2, **PLUGINS)
        attached = spawn("run", str(spec), "--batch-size", "20", "--no-save", "--timeout", "90", url=server.url)
        run_id = run_id_of(server.url)
        waiting = spawn("wait", run_id, "--no-save", "--timeout", "90", url=server.url)
        time.sleep(4)  # `wait` has attached (a run unknown when it starts is "not found", exit 2)
        assert 0 < counts(server.url, run_id).get("done", 0) < 400
        server.stop(signal.SIGKILL)
        time.sleep(1)
        server.start()  # empty: no appendonly, no snapshot
        for proc in (attached, waiting):
            code, _, err = exits_within(proc, 40)
            lines = said(err)
            assert code == 4 and len(lines) == 1, (code, err)
            assert f"run {run_id} vanished" in lines[0] and "run the spec again" in lines[0], lines
        st = run_cli("status", run_id, broker=server.url)
        assert st.returncode == 2 and "not found" in st.stderr
        # nothing the workers did after the loss was written back under the run's keys
        time.sleep(2)
        assert redis.Redis.from_url(server.url).keys(f"ef:run:{run_id}:*") == []
    finally:
        server.stop()
