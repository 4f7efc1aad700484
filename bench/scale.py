"""`make bench-scale`: N `mock` items on the farm with 2 workers, the run archived (issue 23).

    .venv/bin/python bench/scale.py --items 100000 [--no-archive] [--json out.json]

Starts its own redis-server, 2 `evalfarm worker -c 8` processes and `evalfarm run` (the coordinator) in
its own process, all with EVALFARM_ARCHIVE=<tmp>/archive (``--no-archive``: the Redis run store, for the
side-by-side figure). A sampler reads Redis ``used_memory`` and every process's RSS (/proc) every 0.2 s.
Reports: wall time, items/s, Redis peak bytes per item above the empty server's, coordinator and
worker peak RSS, the time from the last item finished (counters: done == N) to the report saved in the
state dir, the coordinator's RSS before that moment and its peak after it (a flat report write keeps
them close), and the dashboard's run page and a filtered case page: server time (Server-Timing), cold
(first request) and warm (median of 5).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench import Redis, free_port, start_worker, stop_worker  # noqa: E402


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def group_pids(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    out.append(int(d.name))
            except OSError:
                continue
    return out


class Sampler(threading.Thread):
    """Peaks of Redis used_memory and of each watched process group's summed RSS."""

    def __init__(self, redis_url: str) -> None:
        super().__init__(daemon=True)
        import redis

        self.r = redis.Redis.from_url(redis_url)
        self.redis_peak = 0
        self.groups: dict[str, int] = {}
        self.peaks: dict[str, float] = {}
        self.marks: dict[str, float] = {}  # label -> coordinator RSS peak up to a moment
        self.stop = threading.Event()

    def watch(self, label: str, pgid: int) -> None:
        self.groups[label] = pgid

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.redis_peak = max(self.redis_peak, int(self.r.info("memory")["used_memory"]))
            except Exception:  # noqa: BLE001 - a sample missed is not a figure
                pass
            for label, pgid in list(self.groups.items()):
                total = sum(rss_mb(p) for p in group_pids(pgid))
                self.peaks[label] = max(self.peaks.get(label, 0.0), total)
            self.stop.wait(0.2)


def spec(tmp: Path, n: int) -> Path:
    with open(tmp / "scale.jsonl", "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"p{i:07d}", "text": f"prompt number {i}",  # every 7th fails
                                 "expected_output_contains": [str(i) if i % 7 else "never"]}) + "\n")
    (tmp / "scale.yaml").write_text("name: scale\ndataset: scale.jsonl\nadapters: [mock]\n")
    return tmp / "scale.yaml"


def timed(url: str) -> float:
    with urllib.request.urlopen(url, timeout=600) as r:
        r.read()
        return float(r.headers["Server-Timing"].split("dur=")[1])


def dashboard(state: Path, run_id: str, env: dict[str, str]) -> dict[str, float]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "serve", "--state-dir", str(state), "--port",
                             str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    out: dict[str, float] = {}
    try:
        proc.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        pages = (("run_page", f"/runs/{run_id}"), ("failed_cases_page_2", f"/runs/{run_id}?filter=failed&page=2"),
                 ("failed_cases_page_1000", f"/runs/{run_id}?filter=failed&page=1000"),
                 ("adapter_cases_page_2", f"/runs/{run_id}?adapter=mock&page=2"),
                 ("cases_api_page_5000", f"/api/runs/{run_id}/cases?page=5000"))
        for label, path in pages:
            t = time.perf_counter()
            out[f"{label}_cold_ms"] = round(timed(base + path), 1)
            out[f"{label}_cold_wall_ms"] = round((time.perf_counter() - t) * 1000, 1)
            out[f"{label}_warm_ms"] = round(statistics.median(timed(base + path) for _ in range(5)), 1)
        out["serve_rss_mb"] = round(rss_mb(proc.pid), 1)
    finally:
        proc.terminate()
        proc.wait(20)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--no-archive", action="store_true", help="the Redis run store (before issue 23)")
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dir", type=Path, help="keep the state dir and archive here (default: a temp dir)")
    args = ap.parse_args()
    n = args.items
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="bench-scale-"))
    tmp.mkdir(parents=True, exist_ok=True)
    spec_path = spec(tmp, n)
    redis = Redis(tmp)
    env = dict(os.environ, EVALFARM_BROKER_URL=redis.url, EVALFARM_BATCH_SIZE=str(args.batch_size),
               PYTHONPATH=str(ROOT))
    env.pop("EVALFARM_ARCHIVE", None)
    if not args.no_archive:
        env["EVALFARM_ARCHIVE"] = str(tmp / "archive")
    import redis as redis_py

    r = redis_py.Redis.from_url(redis.url)
    base_mem = int(r.info("memory")["used_memory"])
    sampler = Sampler(redis.url)
    workers = [start_worker([sys.executable, "-m", "evalfarm.cli", "worker", "-c", "8", "--loglevel", "INFO"], env)
               for _ in range(2)]
    for i, w in enumerate(workers):
        sampler.watch(f"worker{i}", w.pid)
    sampler.start()
    state = tmp / "state"
    figures: dict = {"items": n, "archive": not args.no_archive, "batch_size": args.batch_size}
    try:
        t0 = time.perf_counter()
        coord = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "run", str(spec_path), "--state-dir",
                                  str(state)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 start_new_session=True)
        sampler.watch("coordinator", coord.pid)
        run_id = None
        while run_id is None and coord.poll() is None:
            ids = r.zrange("ef:runs", 0, -1)
            run_id = ids[0].decode() if ids else None
            time.sleep(0.05)
        t_last = None
        while coord.poll() is None:
            done = int(r.hget(f"ef:run:{run_id}:counts", "done") or 0)
            if done >= n and t_last is None:
                t_last = time.perf_counter()
                figures["coordinator_peak_rss_before_report_mb"] = round(sampler.peaks.get("coordinator", 0), 1)
            time.sleep(0.05)
        t_end = time.perf_counter()
        err = coord.stderr.read().decode(errors="replace")
        figures["exit_code"] = coord.returncode
        if coord.returncode not in (0, 1):
            print(err[-3000:], file=sys.stderr)
        saved = state / "runs" / f"{run_id}.json"
        figures.update(run_id=run_id, wall_s=round(t_end - t0, 2), items_per_s=round(n / (t_end - t0), 1),
                       last_item_to_saved_report_s=round(t_end - (t_last or t_end), 2),
                       report_mb=round(saved.stat().st_size / 1e6, 1) if saved.exists() else None)
        time.sleep(0.5)
    finally:
        sampler.stop.set()
        sampler.join(5)
        for w in workers:
            stop_worker(w)
    figures.update(redis_peak_bytes=sampler.redis_peak - base_mem,
                   redis_peak_bytes_per_item=round((sampler.redis_peak - base_mem) / n, 1),
                   redis_after_bytes=int(r.info("memory")["used_memory"]) - base_mem,
                   coordinator_peak_rss_mb=round(sampler.peaks.get("coordinator", 0), 1),
                   worker_peak_rss_mb=[round(sampler.peaks.get(f"worker{i}", 0), 1) for i in range(2)])
    redis.stop()
    if figures.get("report_mb"):
        figures.update(dashboard(state, figures["run_id"], env))
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
