"""What the deploy's grace periods rely on: SIGTERM (docker stop, a Kubernetes scale-down or
rollout) is Celery's warm shutdown. The worker stops taking tasks, finishes the running one,
records it and acks it, then exits: the item runs once, nothing waits for a redelivery."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import redis

from conftest import EVALFARM, env_for


def test_sigterm_lets_the_running_task_finish_before_the_worker_exits(tmp_path, redis_server, start_worker):
    spec = tmp_path / "slow.yaml"
    spec.write_text("name: slow\nadapters: ['slow:3000']\nprompts:\n  - {id: a, text: hi}\n")
    worker = start_worker(redis_server.url, pool="provider", concurrency=1, EVALFARM_PLUGINS="ef_test_adapters")
    coordinator = subprocess.Popen([*EVALFARM, "run", str(spec), "--no-save", "--json", "--batch-size", "1"],
                                   env=env_for(redis_server.url, EVALFARM_PLUGINS="ef_test_adapters"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while b"received" not in worker.log.read_bytes():
            assert time.time() < deadline, worker.log.read_text()
            time.sleep(0.05)
        time.sleep(0.5)  # the 3 s item is under way
        stopped = time.monotonic()
        # only the worker process, as tini (the image's PID 1) forwards the runtime's SIGTERM to it
        os.kill(worker.proc.pid, signal.SIGTERM)
        assert worker.proc.wait(30) == 0, worker.log.read_text()[-2000:]
        waited = time.monotonic() - stopped
        assert waited > 1.5, f"exited after {waited:.1f} s: the running task was cut off"
        assert b"Warm shutdown" in worker.log.read_bytes()
        # the item was recorded and acked before the exit: nothing is left for a redelivery
        r = redis.Redis.from_url(redis_server.url)
        assert r.hlen("unacked") == 0 and r.llen("provider") == 0
        # the run's aggregate waits on its own queue; a fresh aggregate worker finishes the run
        start_worker(redis_server.url, pool="aggregate", concurrency=1, EVALFARM_PLUGINS="ef_test_adapters")
        out, err = coordinator.communicate(timeout=60)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0, err
    report = json.loads(out)
    counts = r.hgetall(f"ef:run:{report['run_id']}:counts")
    assert int(counts[b"done"]) == 1 and int(counts[b"executed"]) == 1  # ran once, not redelivered
    assert report["outcomes"][0]["output"].endswith("hi")
