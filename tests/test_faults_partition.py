"""A network partition between a worker host and Redis, with hosts simulated by network
namespaces (tests/netns_hosts.py; needs root, skipped otherwise).

Redis (with a password: protected mode refuses other hosts without one) runs in its own
namespace, each of two workers in another, the coordinator in the root namespace. A clean run
first gives the reference report and wall time. Then, mid-run, worker 1's link is cut for 30 s
and restored, while worker 2 reaches Redis through a proxy adding 200 ms to every round trip.
Every item must be counted exactly once, the report must equal the clean run's (stable view),
and worker 1 must take new work after the link comes back, without a restart.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import redis

from conftest import EVALFARM, ROOT, env_for, stop_group
from evalfarm.core.report.model import stable_view
from netns_hosts import Hosts, why_not
from test_faults import make_spec

PASSWORD = "partition-test-pw"
CUT_S = 30.0
DELAY_MS = 100  # each way: +200 ms per round trip
N = 1200
ENV = {"EVALFARM_PLUGINS": "ef_test_adapters", "EVALFARM_VISIBILITY_TIMEOUT": "10", "EVALFARM_MAX_IN_FLIGHT": "8"}

pytestmark = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")


def url(host: str, port: int = 6379) -> str:
    return f"redis://:{PASSWORD}@{host}:{port}/0"


class NsWorker:
    def __init__(self, hosts: Hosts, host: str, broker: str, log: Path) -> None:
        self.log = log
        self.proc = hosts.popen(host, [*EVALFARM, "worker", "--pool", "all", "-c", "4", "--loglevel", "INFO"],
                                env=env_for(broker, **ENV), stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.time() + 40
        while b"ready." not in log.read_bytes():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"worker on {host} not ready: {log.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        stop_group(self.proc)

    def tasks_after(self, when: datetime) -> tuple[int, int]:
        """(batches this worker received after ``when``, items it called in batches finished after it)."""
        received = called = 0
        for line in self.log.read_text(errors="replace").splitlines():
            m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO/MainProcess\] Task evalfarm\.run_batch"
                         r"\[[^\]]+\] (received|succeeded in [\d.]+s: (\d+))", line)
            if not m or datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f") < when:
                continue
            if m.group(2) == "received":
                received += 1
            else:
                called += int(m.group(3))
        return received, called


def counts(client: redis.Redis, run_id: str) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall(f"ef:run:{run_id}:counts").items()}


def test_partition_and_latency(tmp_path):
    spec = make_spec(tmp_path, n=N, adapter="slow:150")
    with Hosts() as hosts:
        server = hosts.popen("r", ["redis-server", "--port", "6379", "--bind", "0.0.0.0", "--requirepass", PASSWORD,
                                   "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        coordinator_url = url(hosts.redis_addr("host"))
        client = redis.Redis.from_url(coordinator_url, socket_connect_timeout=2)
        deadline = time.time() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if server.poll() is not None or time.time() > deadline:
                    raise
                time.sleep(0.1)

        def run(*extra: str) -> subprocess.Popen:
            return subprocess.Popen([*EVALFARM, "run", str(spec), "--json", "--no-save", "--batch-size", "20",
                                     "--timeout", "150", *extra], env=env_for(coordinator_url, **ENV),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # the clean run: both workers straight to Redis
        w1 = NsWorker(hosts, "w1", url(hosts.redis_addr("w1")), tmp_path / "w1.log")
        w2 = NsWorker(hosts, "w2", url(hosts.redis_addr("w2")), tmp_path / "w2-clean.log")
        t0 = time.monotonic()
        out, err = run().communicate(timeout=200)
        clean_s = time.monotonic() - t0
        clean = json.loads(out)
        assert len({o["key"] for o in clean["outcomes"]}) == N, err[-2000:]
        w2.stop()

        # worker 2 now reaches Redis through the latency proxy in its own namespace
        proxy = hosts.popen("w2", [sys.executable, str(ROOT / "tests" / "latency_proxy.py"), "--listen",
                                   "127.0.0.1:6390", "--to", f"{hosts.redis_addr('w2')}:6379", "--delay-ms",
                                   str(DELAY_MS)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proxy.stdout.readline().strip() == b"proxy ready"
        w2 = NsWorker(hosts, "w2", url("127.0.0.1", 6390), tmp_path / "w2.log")
        w1_pid = w1.proc.pid

        t0 = time.monotonic()
        proc = run()
        while not client.zrange("ef:runs", 0, 0, desc=True) or len(client.zrange("ef:runs", 0, -1)) < 2:
            time.sleep(0.05)
        run_id = client.zrange("ef:runs", 0, 0, desc=True)[0].decode()
        while counts(client, run_id).get("done", 0) < N // 10:
            time.sleep(0.05)
        hosts.cut("w1")
        cut_at = time.monotonic()
        done_at_cut = counts(client, run_id).get("done", 0)
        time.sleep(CUT_S)
        hosts.restore("w1")
        restored = datetime.now()
        done_at_restore = counts(client, run_id).get("done", 0)
        out, err = proc.communicate(timeout=200)
        faulty_s = time.monotonic() - t0
        assert proc.returncode == 0, err[-2000:]
        report = json.loads(out)
        c = counts(client, run_id)
        received, called = w1.tasks_after(restored)
        figures = {"items": N, "done": c["done"], "executed": c["executed"],
                   "duplicates_executed": c["executed"] - c["done"],
                   "duplicates_counted": len(report["outcomes"]) - len({o["key"] for o in report["outcomes"]}),
                   "clean_wall_s": round(clean_s, 1), "faulty_wall_s": round(faulty_s, 1),
                   "cut_s": CUT_S, "cut_after_s": round(cut_at - t0, 1), "done_at_cut": done_at_cut,
                   "done_at_restore": done_at_restore, "w1_batches_received_after_restore": received,
                   "w1_items_called_after_restore": called}
        print("partition figures:", json.dumps(figures))
        (tmp_path.parent / "partition-figures.json").write_text(json.dumps(figures))

        assert c["done"] == N and figures["duplicates_counted"] == 0
        assert stable_view(report)["outcomes"] == stable_view(clean)["outcomes"]
        assert stable_view(report)["per_adapter"] == stable_view(clean)["per_adapter"]
        assert done_at_cut < done_at_restore < N  # the run went on during the cut, and was not over
        assert w1.proc.poll() is None and w1.proc.pid == w1_pid  # never restarted
        assert received >= 1 and called >= 1, w1.log.read_text()[-3000:]  # worker 1 took new work
        w1.stop()
        w2.stop()
