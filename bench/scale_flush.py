"""Redis FLUSHALL at 60% of an archived run, then `resume` (issue 23's proof).

    .venv/bin/python bench/scale_flush.py --items 200000 [--at 0.6]

Starts its own redis-server, `evalfarm mock-provider` (requests counted at the server) and 2 workers
with EVALFARM_ARCHIVE. Runs the spec detached, flushes Redis once `done` passes the mark, waits for
the batches in the workers' hands to land (archive and request count steady for 1 s), then
`evalfarm resume RUN`. Prints: requests before the resume (R1), items on the archive then (A1),
requests at the end (R2), items run twice (R2 - N: they were asked but never archived) and whether
R2 == R1 + (N - A1). Then runs the same spec again on a clean Redis and compares the two saved
reports outcome by outcome, streamed (timings and run identity aside).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench import Redis, free_port, start_worker, stop_worker, wait_port  # noqa: E402


def requests_at(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as r:
        return int(json.loads(r.read())["requests"])


def archived(archive: Path, run_id: str) -> int:
    return sum(p.read_bytes().count(b"\n") for p in (archive / run_id / "out").glob("*.jsonl"))


def steady(fn, every: float = 1.0):
    last = fn()
    while True:
        time.sleep(every)
        now = fn()
        if now == last:
            return now
        last = now


def same_reports(a: Path, b: Path) -> tuple[bool, int]:
    from evalfarm.core.report.model import VOLATILE_FIGURES, VOLATILE_OUTCOME
    from evalfarm.dashboard.reports import read_head
    from evalfarm.runs.archive import iter_outcomes

    ha, hb = read_head(a), read_head(b)
    strip = lambda h: {x: {k: v for k, v in f.items() if k not in VOLATILE_FIGURES}  # noqa: E731
                       for x, f in h["per_adapter"].items()}
    if strip(ha) != strip(hb):
        return False, 0
    n = 0
    for oa, ob in zip(iter_outcomes(a), iter_outcomes(b), strict=True):
        if {k: v for k, v in oa.items() if k not in VOLATILE_OUTCOME} != \
                {k: v for k, v in ob.items() if k not in VOLATILE_OUTCOME}:
            return False, n
        n += 1
    return True, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200_000)
    ap.add_argument("--at", type=float, default=0.6)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    n = args.items
    tmp = Path(tempfile.mkdtemp(prefix="bench-flush-"))
    port = free_port()
    prov = subprocess.Popen([sys.executable, "-m", "evalfarm.cli", "mock-provider", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    wait_port(port)
    with open(tmp / "d.jsonl", "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"p{i:07d}", "text": f"prompt {i}", "expected_output_contains": [str(i)]})
                     + "\n")
    (tmp / "s.yaml").write_text(f"name: flush\ndataset: d.jsonl\nadapters:\n"
                                f"  - {{id: m, model: m1, base_url: 'http://127.0.0.1:{port}/v1'}}\n")
    redis = Redis(tmp)
    archive = tmp / "archive"
    env = dict(os.environ, EVALFARM_BROKER_URL=redis.url, EVALFARM_ARCHIVE=str(archive), PYTHONPATH=str(ROOT),
               EVALFARM_BATCH_SIZE="100")
    import redis as redis_py

    r = redis_py.Redis.from_url(redis.url)
    workers = [start_worker([sys.executable, "-m", "evalfarm.cli", "worker", "-c", "8", "--loglevel", "INFO"], env)
               for _ in range(2)]
    out: dict = {"items": n, "flush_at": args.at}
    try:
        t0 = time.perf_counter()
        run_id = subprocess.run([sys.executable, "-m", "evalfarm.cli", "run", str(tmp / "s.yaml"), "--detach"],
                                env=env, capture_output=True, text=True, check=True).stdout.strip()
        while int(r.hget(f"ef:run:{run_id}:counts", "done") or 0) < args.at * n:
            time.sleep(0.05)
        out["done_at_flush"] = int(r.hget(f"ef:run:{run_id}:counts", "done") or 0)
        r.flushall()
        out["archived_before_resume"] = a1 = steady(lambda: archived(archive, run_id))
        out["requests_before_resume"] = r1 = steady(lambda: requests_at(port))
        res = subprocess.run([sys.executable, "-m", "evalfarm.cli", "resume", run_id, "--state-dir",
                              str(tmp / "st")], env=env, capture_output=True, text=True)
        out["resume_exit"] = res.returncode
        out["resume_said"] = res.stderr.strip().splitlines()[:2]
        out["wall_s"] = round(time.perf_counter() - t0, 1)
        out["requests_total"] = r2 = requests_at(port)
        out["items_run_twice"] = r2 - n
        out["asked_but_not_archived_at_resume"] = r1 - a1
        out["only_unarchived_rerun"] = r2 == r1 + (n - a1)
        r.flushall()
        clean = subprocess.run([sys.executable, "-m", "evalfarm.cli", "run", str(tmp / "s.yaml"), "--state-dir",
                                str(tmp / "clean")], env=env, capture_output=True, text=True)
        out["clean_exit"] = clean.returncode
        a = tmp / "st" / "runs" / f"{run_id}.json"
        b = next(p for p in (tmp / "clean" / "runs").glob("*.json") if not p.name.endswith(".lineage.json"))
        out["report_equal_to_clean"], out["outcomes_compared"] = same_reports(a, b)
    finally:
        for w in workers:
            stop_worker(w)
        redis.stop()
        prov.terminate()
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
