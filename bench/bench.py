"""`make bench`: throughput and memory of the farm beside references measured in the same run.

Foundation figures: a 10,000-item `mock` run on the embedded farm and on Redis
with one worker, beside a bare Celery chord of 10,000 no-op tasks on the same
Redis (waited on by polling the body's result key, the fast way; see DESIGN.md).
Machines here are noisy: compare the ratios, not the absolute numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not open")


class Redis:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(self.port),
                                      "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def flush(self) -> None:
        import redis
        redis.Redis.from_url(self.url).flushall()

    def used_memory_mb(self) -> float:
        import redis
        return redis.Redis.from_url(self.url).info("memory")["used_memory"] / 1e6

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def start_worker(args: list[str], env: dict[str, str], ready: bytes = b"ready.",
                 cwd: Path | None = None) -> subprocess.Popen:
    """``cwd``: `python -m` puts the working directory first on sys.path, so a worker of another
    checkout must not start in this one."""
    log = tempfile.NamedTemporaryFile(prefix="bench-worker-", suffix=".log", delete=False)
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    proc.log_path = log.name  # the worker's log: bench/whole.py counts limiter errors in it
    deadline = time.time() + 60
    while time.time() < deadline:
        if ready in Path(log.name).read_bytes():
            return proc
        if proc.poll() is not None:
            raise RuntimeError(Path(log.name).read_text()[-3000:])
        time.sleep(0.1)
    raise RuntimeError("worker not ready")


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def mock_spec(tmp: Path, n_items: int, adapters: list[str] | None = None):
    from evalfarm import open_spec
    adapters = adapters or ["mock"]
    n_prompts = n_items // len(adapters)
    with open(tmp / "bench.jsonl", "w") as fh:
        for i in range(n_prompts):
            fh.write(json.dumps({"id": f"p{i:06d}", "text": f"prompt number {i}",
                                 "expected_output_contains": [str(i)]}) + "\n")
    (tmp / "bench.yaml").write_text(f"name: bench\ndataset: bench.jsonl\nadapters: {json.dumps(adapters)}\n")
    return open_spec(tmp / "bench.yaml")


def farm_run(spec_file, broker: str | None) -> tuple[float, int]:
    """One run through the orchestrator in this process (in-process backend, or the farm's coordinator)."""
    from evalfarm.runs.submit import Orchestrator
    from evalfarm.spec.binding import bind_environment
    if broker is None:
        from evalfarm.executors.inprocess import InProcessBackend
        backend = InProcessBackend()
    else:
        from evalfarm.executors.celery.coordinator import CeleryBackend
        from evalfarm.executors.celery.settings import FarmSettings
        backend = CeleryBackend(FarmSettings.from_env(broker_url=broker))
    orchestrator = Orchestrator(backend)
    t0 = time.perf_counter()
    plan = orchestrator.submit(bind_environment(spec_file.spec), spec_file.source)
    orchestrator.wait(plan.run_id, timeout_s=600)
    elapsed = time.perf_counter() - t0
    head = json.loads(backend.store.get_blob(plan.run_id, "summary"))
    return elapsed, sum(f["items"] for f in head["per_adapter"].values())


def bare_chord(redis_url: str, n: int, env: dict[str, str]) -> float:
    env = dict(env, BENCH_REDIS_URL=redis_url)
    worker = start_worker([sys.executable, "-m", "celery", "-A", "bench.bare_chord", "worker", "-P", "threads",
                           "-c", "8", "--without-gossip", "--without-mingle", "--without-heartbeat",
                           "--loglevel", "INFO"], env)
    try:
        os.environ["BENCH_REDIS_URL"] = redis_url
        from celery import chord
        import bench.bare_chord as bc
        bc.app.conf.broker_url = bc.app.conf.result_backend = redis_url
        t0 = time.perf_counter()
        result = chord(bc.noop.s(i) for i in range(n))(bc.done.s())
        while result.state not in ("SUCCESS", "FAILURE"):  # poll the body's key, not the header's pub/sub
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        assert result.get(timeout=5) == n
        return elapsed
    finally:
        stop_worker(worker)


def row(name: str, items: int, seconds: float, ref: float | None = None) -> dict:
    rate = items / seconds
    out = {"case": name, "items": items, "seconds": round(seconds, 2), "items_per_s": round(rate, 1)}
    if ref:
        out["vs_bare_chord"] = round(rate / ref, 2)
    print(f"  {name:<44} {items:>7} items {seconds:>8.2f} s {rate:>10,.0f} items/s"
          + (f"   x{rate / ref:.2f} vs bare chord" if ref else ""), flush=True)
    return out


def foundation(redis: Redis, tmp: Path, n: int, env: dict[str, str]) -> list[dict]:
    print(f"\n== foundation: {n:,} mock items ==", flush=True)
    spec = mock_spec(tmp, n)
    rows = []
    redis.flush()
    chord_s = bare_chord(redis.url, n, env)
    ref = n / chord_s
    rows.append(row("bare Celery chord, no-op tasks, 1 worker", n, chord_s))
    t, items = farm_run(spec, None)
    rows.append(row("evalfarm embedded (no server)", items, t, ref))
    redis.flush()
    worker = start_worker([sys.executable, "-m", "evalfarm.cli", "worker", "-c", "8", "--loglevel", "INFO"],
                          dict(env, EVALFARM_BROKER_URL=redis.url))
    try:
        t, items = farm_run(spec, redis.url)
        rows.append(row("evalfarm on Redis, 1 worker", items, t, ref))
    finally:
        stop_worker(worker)
    return rows


def start_provider(latency_ms: int, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "mock-provider", "--port", str(port),
                             "--latency-ms", str(latency_ms)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}/v1"


def provider_spec(tmp: Path, n: int, base_url: str):
    from evalfarm import open_spec
    with open(tmp / "cases.jsonl", "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"c{i:05d}", "text": f"case {i} says hello", "expected_output_contains": ["hello"]}) + "\n")
    (tmp / "prov.yaml").write_text(f"name: prov\ndataset: cases.jsonl\nadapters:\n"
                                   f"  - {{id: m, model: m, base_url: '{base_url}'}}\n")
    return open_spec(tmp / "prov.yaml")


def providers(redis: Redis, tmp: Path, n: int, env: dict[str, str], in_flight: int = 64) -> list[dict]:
    print(f"\n== providers: {n:,} items against mock-provider, {in_flight} in flight, Redis + 1 worker ==", flush=True)
    rows = []
    for latency in (0, 200):
        prov, url = start_provider(latency, env)
        redis.flush()
        worker = start_worker([sys.executable, "-m", "evalfarm.cli", "worker", "-c", "8", "--loglevel", "INFO"],
                              dict(env, EVALFARM_BROKER_URL=redis.url, EVALFARM_MAX_IN_FLIGHT=str(in_flight)))
        try:
            t, items = farm_run(provider_spec(tmp, n, url), redis.url)
        finally:
            stop_worker(worker)
            stop_worker(prov)
        r = row(f"mock-provider at {latency} ms", items, t)
        if latency:
            ideal = in_flight / (latency / 1000)
            r["ideal_items_per_s"] = ideal
            r["fraction_of_ideal"] = round(r["items_per_s"] / ideal, 3)
            print(f"  {'':<44} ideal {ideal:,.0f} items/s -> {r['fraction_of_ideal'] * 100:.1f}% of ideal", flush=True)
        rows.append(r)
    return rows


def coordinator_subprocess(spec_path: Path, broker: str, env: dict[str, str]) -> tuple[float, float, int]:
    """`evalfarm run` as its own process: (seconds, peak RSS MB, exit code)."""
    code = ("import resource, subprocess, sys, time; t=time.perf_counter(); "
            "r=subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024, r.returncode)")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "evalfarm.cli", "run", str(spec_path),
                          "--broker", broker, "--no-save", "--json"], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def farm(redis: Redis, tmp: Path, n: int, env: dict[str, str], chord_n: int) -> list[dict]:
    print(f"\n== farm: {n:,} mock items, 2 worker processes, coordinator in its own process ==", flush=True)
    rows = []
    redis.flush()
    chord_s = bare_chord(redis.url, chord_n, env)
    rows.append(row("bare Celery chord, no-op tasks, 1 worker", chord_n, chord_s))
    ref = chord_n / chord_s
    mock_spec(tmp, n)
    redis.flush()
    workers = [start_worker([sys.executable, "-m", "evalfarm.cli", "worker", "-c", "8", "--loglevel", "INFO"],
                            dict(env, EVALFARM_BROKER_URL=redis.url)) for _ in range(2)]
    try:
        t, rss, code = coordinator_subprocess(tmp / "bench.yaml", redis.url, env)
        mem = redis.used_memory_mb()
    finally:
        for w in workers:
            stop_worker(w)
    r = row("evalfarm on Redis, 2 workers", n, t, ref)
    r.update(coordinator_peak_rss_mb=round(rss, 1), redis_used_memory_mb=round(mem, 1), exit_code=code)
    print(f"  {'':<44} coordinator peak RSS {rss:.0f} MB, Redis used memory {mem:.0f} MB after the run", flush=True)
    rows.append(r)
    return rows


def scaling(redis: Redis, tmp: Path, n: int, env: dict[str, str], in_flight: int = 64) -> list[dict]:
    print(f"\n== scaling: {n:,} items against mock-provider at 200 ms, {in_flight} in flight per worker ==", flush=True)
    rows = []
    prov, url = start_provider(200, env)
    try:
        for n_workers in (1, 2):
            redis.flush()
            workers = [start_worker([sys.executable, "-m", "evalfarm.cli", "worker", "-c", "8", "--loglevel", "INFO"],
                                    dict(env, EVALFARM_BROKER_URL=redis.url, EVALFARM_MAX_IN_FLIGHT=str(in_flight)))
                       for _ in range(n_workers)]
            try:
                t, items = farm_run(provider_spec(tmp, n, url), redis.url)
            finally:
                for w in workers:
                    stop_worker(w)
            r = row(f"{n_workers} worker(s)", items, t)
            ideal = n_workers * in_flight / 0.2
            r.update(workers=n_workers, ideal_items_per_s=ideal, fraction_of_ideal=round(r["items_per_s"] / ideal, 3))
            print(f"  {'':<44} ideal {ideal:,.0f} items/s -> {r['fraction_of_ideal'] * 100:.1f}% of ideal", flush=True)
            rows.append(r)
    finally:
        stop_worker(prov)
    print(f"  scaling 1 -> 2 workers: x{rows[1]['items_per_s'] / rows[0]['items_per_s']:.2f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--farm-items", type=int, default=100_000)
    parser.add_argument("--chord-items", type=int, default=10_000,
                        help="size of the bare-chord reference in the farm section")
    parser.add_argument("--only", choices=["whole", "foundation", "providers", "farm", "scaling", "spawn"],
                        action="append",
                        help="run only these sections (default: all)")
    parser.add_argument("--before", type=Path, help="a checkout of an earlier commit (with its own .venv): the "
                                                     "whole-process section times it too, side by side")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        redis = Redis(tmp)
        try:
            sections = args.only or ["whole", "foundation", "providers", "farm", "scaling", "spawn"]
            results = {}
            if "whole" in sections:
                from bench import whole
                results["whole"] = whole.run(tmp, env, start_provider, start_worker, stop_worker, redis, args.before)
            if "foundation" in sections:
                results["foundation"] = foundation(redis, tmp, args.items, env)
            if "providers" in sections:
                results["providers"] = providers(redis, tmp, 2000, env)
            if "farm" in sections:
                results["farm"] = farm(redis, tmp, args.farm_items, env, args.chord_items)
            if "scaling" in sections:
                results["scaling"] = scaling(redis, tmp, 4000, env)
            if "spawn" in sections:  # coding agents: bench/spawn.py
                from bench import spawn as spawn_bench

                redis.flush()
                results["spawn"] = spawn_bench.spawn(redis.url, tmp, env, start_worker, stop_worker)
        finally:
            redis.stop()
    print(f"\ncoordinator (this process) peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
